"""A Hugging Face causal LM served in-process through ``transformers``, as an OpenAI-compatible
upstream (``--inference.backend transformers``).

The routes, the request checks every engine shares, the answer and its stream, the token record
(``extras``) and the swap under the decoding lock are the base's
(:class:`reef_core.upstream.engine.Engine`, as for the embedded model); what this module adds is
below: the chat template, top-p and stop sequences, batched decoding, and LoRA adapters.

**Generation.**  One worker thread owns the model.  Requests wait in a queue; the worker takes
every request waiting (up to :data:`MAX_BATCH`) and decodes them together, one forward pass per
token for the whole batch, prompts left-padded, a KV cache, each row with its own sampling
settings (temperature, top-p, seed, stop sequences, max tokens): several clients at once cost
little more than one, which is where the throughput of a CPU-served model comes from.  A request
that arrives while a batch runs waits for the next one.  The loop is written here rather than
taken from ``model.generate`` because ``generate`` samples a whole batch with one setting and
returns only at the end; reef needs per-row settings, per-token streaming and the log-prob of
each sampled token.

**Log-probs** are those of the sampled token under the distribution it was sampled from (the
temperature-scaled one, before top-p truncation; for temperature 0, the model's own), as the
embedded model records them.

**Streaming** is token by token: each new piece of text goes to the client's SSE stream as soon
as it is decoded; text that could still become a stop sequence (or an incomplete UTF-8 character)
is held back until it cannot.

**Tools** are refused with a clear 400 when the model's chat template has no tool support (the
answer could only ever be text); with a template that has, they are rendered into the prompt.
The answer is always text (``message.content``): the engine reads no tool calls back out of it,
so there is no tool call to constrain.

**Constrained decoding** (``response_format``, :mod:`~reef_core.upstream.constrain`): each row
carries its own matcher, or none; at every step the constrained rows' masks are computed together
and applied to their logits before they sample (temperature, top-p and the log-probs are those of
the masked distribution, the one sampled from), and each token taken advances the row's matcher.
Unconstrained rows in the same batch are untouched.  The vocabulary is built from the tokenizer
at the first constrained request (about 0.3 s for SmolLM2).

**Adapters.**  Each scenario can be served its own LoRA adapter (``peft``), its current release:
:meth:`TransformersEngine.swap` installs one (or ``None``, the base model) with its version, from
the next batch on.  The base model itself is never touched: adapters live on a second module tree
that shares the base's weights (frozen; :meth:`~TransformersEngine.shared_copy`), and a scenario
without an adapter is answered by the base model as it was loaded.  The worker decodes the
requests of one adapter together; requests for different adapters go in separate batches, one
after the other.  A swap waits for the batch in flight (the worker holds the lock while it
decodes), so no answer mixes two versions.
"""

from __future__ import annotations

import copy
import inspect
import queue
import threading
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from reef_core.errors import ConfigError, InvalidInput
from reef_core.upstream import constrain
from reef_core.upstream.engine import Answer, Emit, Engine

# peft says so on every swap (the worker sets the adapter of each batch itself), and transformers
# warns of its own deprecated call inside peft: noise in the daemon's log, nothing to act on
warnings.filterwarnings("ignore", message=r"Adapter reef\d+ was active which is now deleted")
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated")

__all__ = ["LORA_DEFAULTS", "MAX_BATCH", "TransformersEngine"]

MAX_BATCH = 16
#: how long the worker keeps gathering a batch after its first request: while requests keep
#: arriving at most GATHER_GAP_S apart, up to GATHER_S in all (a lone request waits GATHER_GAP_S)
GATHER_S = 0.05
GATHER_GAP_S = 0.01
#: nucleus sampling looks for the top-p tokens among the most likely TOP_K first (a partial
#: selection instead of sorting the whole vocabulary, which cost a quarter of a batch's time)
TOP_K = 2048
_MAX_STOPS = 4
#: the adapter an engine builds when a swap names no settings (``adapter_config.json`` keys)
LORA_DEFAULTS: dict[str, Any] = {
    "peft_type": "LORA",
    "r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "target_modules": ["k_proj", "o_proj", "q_proj", "v_proj"],
    "bias": "none",
}


@dataclass
class _Job:
    """One request in the worker's queue, and where its text goes."""

    prompt: list[int]
    max_new: int
    temperature: float
    top_p: float
    stop: list[str]
    generator: torch.Generator | None
    emit: Emit | None  # a streaming client's next piece of text
    scenario: str | None = None  # whose adapter answers
    constraint: constrain.Matcher | None = None  # the response_format the answer follows
    done: Future[Answer] = field(default_factory=Future)


@dataclass(frozen=True, eq=False)
class _Served:
    """What one scenario is served: a ``peft`` adapter or a whole model of its own (neither: the
    base model), and its version."""

    adapter: str | None
    version: int
    config: dict[str, Any] | None = None
    model: Any = None  # a full copy with trained weights (grpo with recipe.config.lora false)


_BASE = _Served(None, 0)


class TransformersEngine(Engine[_Served]):
    """The :class:`~reef_core.upstream.engine.Engine` of a ``transformers`` causal LM; the grpo
    recipe trains a LoRA adapter per scenario on it (:meth:`swap`)."""

    label = "the local model"
    id_prefix = "chatcmpl-reef"
    default_new_tokens = 256
    max_new_tokens = 1024
    lowest_temperature = 0.0
    temperature_error = "temperature must be a number from 0 to 2"

    def __init__(self, model: Any, tokenizer: Any, *, model_name: str, identity: str = "") -> None:
        super().__init__(model_name, _BASE)
        self.model = model
        self.tokenizer = tokenizer
        self.identity = identity  # the base model's sha256
        self.device = next(model.parameters()).device
        self.context = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        eos = {tokenizer.eos_token_id}
        configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos.update(configured if isinstance(configured, list) else [configured])
        self.eos = {int(t) for t in eos if t is not None}
        self.pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos))
        template = tokenizer.chat_template or ""
        self.tools_supported = "tools" in template
        # transformers 5 renamed the KV cache argument (and output) from past_key_values to cache
        accepted = inspect.signature(model.forward).parameters
        self._cache = "cache" if "cache" in accepted else "past_key_values"
        # the vocabulary's logits of the last position only (the one sampled from): the prompt's
        # pass would otherwise compute them at every position, [batch, prompt, vocabulary]
        # (SmolLM2: 200 KB a token, 126 MB for 16 prompts of 40 tokens, GBs for long prompts)
        self._last_logits = {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._adapted: Any = None  # the peft model over a shared copy, built at the first adapter
        self._names = 0
        self._tokens: constrain.Vocabulary | None = None  # built at the first constrained request
        self._tokens_lock = threading.Lock()
        #: how the worker has batched: batches decoded, and the most requests in one
        self.stats = {"batches": 0, "largest": 0}
        self._worker = threading.Thread(target=self._work, name="reef-transformers", daemon=True)
        self._worker.start()

    # -- weights -----------------------------------------------------------------------------

    def shared_copy(self) -> Any:
        """A copy of the base model whose modules are its own but whose weights are the base's
        tensors (frozen, never copied): wrapping it with adapters, or training them on it, leaves
        the base model and what it serves untouched."""
        memo: dict[int, Any] = {}
        for tensor in self.model.parameters():
            memo[id(tensor)] = torch.nn.Parameter(tensor.data, requires_grad=False)
        for tensor in self.model.buffers():
            memo[id(tensor)] = tensor
        return copy.deepcopy(self.model, memo).eval()

    def adapter_state(self, scenario: str | None) -> tuple[dict[str, torch.Tensor] | None, int]:
        """A private copy of the adapter ``scenario`` is served (``None``: the base model), in
        ``adapter_model.safetensors``' names, and its version."""
        from peft import get_peft_model_state_dict

        with self._lock:
            served = self._serving(scenario)
            if served.adapter is None:
                return None, served.version
            state = get_peft_model_state_dict(
                self._adapted, adapter_name=served.adapter, save_embedding_layers=False
            )
            return {k: v.detach().clone() for k, v in state.items()}, served.version

    def swap(
        self,
        scenario: str,
        adapter_state: Mapping[str, torch.Tensor] | None,
        version: int,
        *,
        config: Mapping[str, Any] | None = None,
    ) -> float:
        """Serve ``adapter_state`` (LoRA weights in ``adapter_model.safetensors``' names, with
        ``config`` as in ``adapter_config.json``; default :data:`LORA_DEFAULTS`) to ``scenario``
        from the next batch on, or the base model for ``None``; returns the seconds it took
        (including the wait for the batch in flight).  An adapter that does not fit the model is
        refused and what was served stays."""
        settings = _lora_settings(config)

        def install(old: _Served) -> _Served:
            new = _Served(None, version)
            if adapter_state is not None:
                new = _Served(self._install(dict(adapter_state), settings), version, settings)
            self._retire(old)
            return new

        return self._swap(scenario, install)

    def swap_weights(self, scenario: str, state: Mapping[str, torch.Tensor] | None, version: int) -> float:
        """Serve ``scenario`` a whole model of its own with ``state`` as its weights (every tensor
        of the base model's ``state_dict``), or the base model for ``None``, from the next batch
        on; returns the seconds it took.  Weights that do not fit the model are refused and what
        was served stays.  Each such scenario holds a full copy of the model in memory."""
        started = time.perf_counter()
        model = None
        if state is not None:
            model = copy.deepcopy(self.model)  # built outside the lock: serving goes on meanwhile
            try:
                model.load_state_dict(dict(state), strict=True)
            except (RuntimeError, KeyError) as exc:
                raise ConfigError(f"the weights do not fit {self.model_name}: {exc}") from exc
            model.eval().requires_grad_(False)

        def install(old: _Served) -> _Served:
            self._retire(old)
            return _Served(None, version, model=model)

        return self._swap(scenario, install, started=started)

    def _forgotten(self, old: _Served) -> None:
        self._retire(old)

    def _retire(self, old: _Served) -> None:
        """Drop the adapter a scenario was served (called under the lock, as it is replaced)."""
        if old.adapter is not None:
            self._adapted.delete_adapter(old.adapter)

    def weights_state(self, scenario: str | None) -> tuple[dict[str, torch.Tensor] | None, int]:
        """A private copy of the whole-model weights ``scenario`` is served (``None``: the base
        model, or an adapter), and its version."""
        with self._lock:
            served = self._serving(scenario)
            if served.model is None:
                return None, served.version
            return {k: v.detach().clone() for k, v in served.model.state_dict().items()}, served.version

    def _install(self, state: dict[str, torch.Tensor], settings: dict[str, Any]) -> str:
        """A new adapter holding ``state``; its name.  Called under the lock."""
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        self._names += 1
        name = f"reef{self._names}"
        known = {f.name for f in fields(LoraConfig)} - {"peft_type", "base_model_name_or_path"}
        try:
            lora = LoraConfig(**{k: v for k, v in settings.items() if k in known})
            if self._adapted is None:
                self._adapted = get_peft_model(self.shared_copy(), lora, adapter_name=name)
            else:
                self._adapted.add_adapter(name, lora)
        except (TypeError, ValueError) as exc:  # settings peft refuses, modules the model lacks
            if self._adapted is not None and name in self._adapted.peft_config:
                self._adapted.delete_adapter(name)
            raise ConfigError(f"the adapter's settings do not fit {self.model_name}: {exc}") from exc
        try:
            loaded: Any = set_peft_model_state_dict(self._adapted, state, adapter_name=name)
            expected = {k for k in self._adapted.state_dict() if f".{name}." in k}
            missing = expected & set(loaded.missing_keys)
            if loaded.unexpected_keys or missing:
                raise ConfigError(
                    f"the adapter does not fit {self.model_name}: "
                    f"{len(loaded.unexpected_keys)} unknown and {len(missing)} missing tensors"
                )
        except RuntimeError as exc:  # shapes that do not match the model
            self._adapted.delete_adapter(name)
            raise ConfigError(f"the adapter does not fit {self.model_name}: {exc}") from exc
        except ConfigError:
            self._adapted.delete_adapter(name)
            raise
        self._adapted.eval()
        return name

    # -- requests ----------------------------------------------------------------------------

    def _options(self, data: dict[str, Any]) -> dict[str, Any]:
        top_p = data.get("top_p", 1.0)
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise InvalidInput("top_p must be a number above 0, at most 1", field="top_p")
        stop = data.get("stop")
        stops = [stop] if isinstance(stop, str) else stop or []
        if (
            not isinstance(stops, list)
            or len(stops) > _MAX_STOPS
            or not all(isinstance(s, str) and s for s in stops)
        ):
            raise InvalidInput(
                f"stop must be a string or a list of at most {_MAX_STOPS} strings", field="stop"
            )
        tools = data.get("tools") or []
        if not isinstance(tools, list):
            raise InvalidInput("tools must be a list", field="tools")
        return {"top_p": float(top_p), "stop": stops, "tools": tools}

    def _prompt(self, request: dict[str, Any]) -> list[int]:
        """The chat template's token ids; ``max_tokens`` is lowered to the room left."""
        if not isinstance(request["messages"], list) or not request["messages"]:
            raise InvalidInput("messages must be a non-empty list", field="messages")
        if request["tools"] and not self.tools_supported:
            raise InvalidInput(
                f"{self.model_name} has no tool support in its chat template: send the request without tools",
                field="tools",
            )
        messages = [_flat(m, i) for i, m in enumerate(request["messages"])]
        prompt = self.tokenizer.apply_chat_template(
            messages,
            tools=request["tools"] or None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if hasattr(prompt, "input_ids"):  # a BatchEncoding from some tokenizers
            prompt = prompt["input_ids"]
        prompt = [int(t) for t in prompt]
        room = self.context - len(prompt)
        if room < 1:
            raise InvalidInput(
                f"the prompt is {len(prompt)} tokens; {self.model_name} reads at most {self.context}",
                field="messages",
            )
        request["max_tokens"] = min(request["max_tokens"], room)
        return prompt

    def _origin(self) -> dict[str, Any]:
        return {"engine": "transformers", "base": self.identity}

    def _vocabulary(self) -> constrain.Vocabulary:
        with self._tokens_lock:
            if self._tokens is None:
                self._tokens = constrain.Vocabulary.of_tokenizer(self.tokenizer, eos=self.eos)
            return self._tokens

    def _submit(self, request: dict[str, Any], *, scenario: str | None, emit: Emit | None) -> Future[Answer]:
        generator = None
        if request["seed"] is not None:
            generator = torch.Generator(device=self.device).manual_seed(request["seed"])
        job = _Job(
            prompt=request["prompt"],
            max_new=request["max_tokens"],
            temperature=request["temperature"],
            top_p=request["top_p"],
            stop=request["stop"],
            generator=generator,
            emit=emit,
            scenario=scenario,
            constraint=request["constraint"],
        )
        self._jobs.put(job)
        return job.done

    async def close(self) -> None:
        self._jobs.put(None)

    # -- the worker --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            batch = [job]
            deadline = time.monotonic() + GATHER_S
            while len(batch) < MAX_BATCH:
                # clients that send together arrive a few ms apart (each prompt is templated on
                # the event loop first): wait for the next while they keep coming
                wait = min(GATHER_GAP_S, deadline - time.monotonic())
                try:
                    more = self._jobs.get(timeout=wait) if wait > 0 else self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._jobs.put(None)  # stop after this batch
                    break
                batch.append(more)
            with self._lock:
                groups: dict[tuple[str | None, int, int], tuple[_Served, list[_Job]]] = {}
                for each in batch:  # one batch per thing served: the base, an adapter, a full copy
                    served = self._serving(each.scenario)
                    copy_id = 0 if served.model is None else id(served.model)
                    groups.setdefault((served.adapter, served.version, copy_id), (served, []))[1].append(each)
                for served, jobs in groups.values():
                    self.stats["batches"] += 1
                    self.stats["largest"] = max(self.stats["largest"], len(jobs))
                    try:
                        self._decode(jobs, served)
                    except Exception as exc:  # a failed batch fails its requests, never the worker
                        for failed in jobs:
                            if not failed.done.done():
                                failed.done.set_exception(exc)

    def _decode(self, jobs: list[_Job], served: _Served) -> None:
        n, width = len(jobs), max(len(j.prompt) for j in jobs)
        ids = torch.full((n, width), self.pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, job in enumerate(jobs):
            ids[i, width - len(job.prompt) :] = torch.tensor(job.prompt)
            mask[i, width - len(job.prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        rows = [_Row(job) for job in jobs]
        masks = None
        if any(job.constraint is not None for job in jobs):
            masks = constrain.Masks(self._vocabulary(), n)
        past = None
        version, model = served.version, self.model
        if served.model is not None:
            model = served.model
        elif served.adapter is not None:
            self._adapted.set_adapter(served.adapter)
            model = self._adapted.base_model.model  # the shared copy, with the adapters in it
        with torch.inference_mode():
            for _ in range(max(j.max_new for j in jobs)):
                out = model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    **{self._cache: past},
                    **self._last_logits,
                )
                past = getattr(out, self._cache)
                logits = out.logits[:, -1, :].float()
                if masks is not None:
                    masks.apply(logits, [row.job.constraint if row.finish is None else None for row in rows])
                chosen = []
                for i, row in enumerate(rows):
                    if row.finish is None:
                        token, logprob = _sample(logits[i], row.job)
                        self._take(row, token, logprob)
                    chosen.append(row.tokens[-1] if row.tokens and row.finish is None else self.pad)
                if all(row.finish is not None for row in rows):
                    break
                ids = torch.tensor(chosen, device=self.device).unsqueeze(1)
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=self.device)], dim=1)
                positions = positions[:, -1:] + 1
        for row in rows:
            finish = row.finish or "length"
            self._flush(row, final=True)
            record = self._record(row.job.prompt, row.tokens, row.logprobs, row.job.temperature, version)
            row.job.done.set_result(Answer(row.text, finish, record))

    def _take(self, row: _Row, token: int, logprob: float) -> None:
        row.tokens.append(token)
        row.logprobs.append(logprob)
        if token in self.eos:
            row.finish = "stop"  # the end-of-turn token is kept in the ids (training learns to stop)
            return
        if row.job.constraint is not None:
            row.job.constraint.advance(token)
        row.text = self.tokenizer.decode(
            [t for t in row.tokens if t not in self.eos], skip_special_tokens=True
        )
        for stop in row.job.stop:
            at = row.text.find(stop)
            if at >= 0:
                row.text, row.finish = row.text[:at], "stop"
        if row.finish is None and len(row.tokens) >= row.job.max_new:
            row.finish = "length"
        if row.finish is None:
            self._flush(row, final=False)

    @staticmethod
    def _flush(row: _Row, *, final: bool) -> None:
        """Send what of the text can no longer change (or all of it, at the end)."""
        end = len(row.text)
        if not final:
            hold = max((len(s) - 1 for s in row.job.stop), default=0)
            end -= hold
            while end > row.sent and row.text[end - 1] == "\ufffd":  # a character still incomplete
                end -= 1
        if end > row.sent and row.job.emit is not None:
            row.job.emit(row.text[row.sent : end])
        row.sent = max(row.sent, end)


@dataclass
class _Row:
    job: _Job
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    sent: int = 0
    finish: str | None = None


def _sample(logits: torch.Tensor, job: _Job) -> tuple[int, float]:
    """One token for a row: greedy at temperature 0, else nucleus sampling with the row's seed."""
    if job.temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits))
        return token, float(logp[token])
    logp = torch.log_softmax(logits / job.temperature, dim=-1)
    probs = logp.exp()
    if job.top_p < 1.0:
        ordered, order = torch.topk(probs, min(TOP_K, probs.shape[-1]))
        if float(ordered.sum()) < job.top_p:  # a flat distribution: the nucleus is wider than TOP_K
            ordered, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(ordered, dim=-1) - ordered < job.top_p  # always keeps the first
        pick = int(torch.multinomial(ordered[keep], 1, generator=job.generator))
        token = int(order[keep][pick])
    else:
        token = int(torch.multinomial(probs, 1, generator=job.generator))
    return token, float(logp[token])


def _lora_settings(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``adapter_config.json`` settings, normalised so that equal settings compare equal."""
    settings = dict(LORA_DEFAULTS if config is None else config)
    if str(settings.get("peft_type", "LORA")).upper() != "LORA":
        raise ConfigError(f"the adapter is {settings['peft_type']}; the engine serves LoRA adapters")
    targets = settings.get("target_modules")
    if isinstance(targets, (list, tuple, set)):
        settings["target_modules"] = sorted(targets)
    return settings


def _flat(message: Any, index: int) -> dict[str, Any]:
    """A chat message with its content as one string (OpenAI's content parts joined)."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise InvalidInput(f"messages[{index}] must be an object with a role", field=f"messages[{index}]")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    flat = {"role": message["role"], "content": content if isinstance(content, str) else ""}
    if message.get("tool_calls"):
        flat["tool_calls"] = message["tool_calls"]
    return flat
