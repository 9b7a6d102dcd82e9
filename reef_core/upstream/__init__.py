"""What answers the daemon's model requests: an HTTP upstream, or a model served in-process.

| module | owns |
|---|---|
| ``seam`` | the ``Answerer`` every answerer is (request and stream, once, for an ``Ask``), the reply types |
| ``client`` | the HTTP upstream (OpenAI- or Anthropic-compatible): one pooled session, its failures |
| ``lean`` | keep-alive HTTP/1.1 POSTs to a plain-``http`` upstream, without aiohttp's overhead |
| ``engine`` | the base of the in-process engines: routes, request checks, answers, streams, swaps |
| ``constrain`` | ``response_format`` honoured in-process: the schema compiled, per-answer token masks |
| ``local`` | the embedded model's engine (``builtin:tiny``) |
| ``transformers_engine`` | a Hugging Face causal LM's engine: batched decoding, LoRA adapters |
| ``choice`` | which engine serves in-process, chosen from the settings, and loading it |
| ``sglang`` | driving an SGLang server (GPU, optional): launch, token-exact chat, weight hot-swaps |
| ``sglang_tokens`` | SGLang's chat answer read into the engine's own token ids and logprobs |

Owns: talking HTTP to the configured upstream and turning its failures into reef's errors
(``UpstreamRejected``, ``UpstreamUnavailable``, ``UpstreamTimeout``) in exactly one place; serving
the embedded model or a ``transformers`` model behind the same seam, with each answer's token
record and per-scenario weights; choosing which one serves.
Does not own: formats (``reef_core.wire``), recording (the daemon), the models themselves and
training them (``reef_core.models``, the recipes).
May import: ``aiohttp``, ``torch``, ``peft``, ``transformers``, ``llguidance``,
``reef_core.errors``, ``reef_core.config``, ``reef_core.models``, ``reef_core.__version__``;
torch and peft only in ``local`` and ``transformers_engine`` (and torch inside ``constrain``'s
mask functions), llguidance only in ``constrain``, inside the functions that use it,
transformers only when ``choice`` loads a model (and llguidance's when a vocabulary is built
from its tokenizer): importing this package, ``engine``, ``choice`` or ``sglang`` needs none of
them.
"""

from reef_core.upstream.client import UpstreamClient
from reef_core.upstream.seam import Answerer, AnswerStream, UpstreamReply

__all__ = ["AnswerStream", "Answerer", "UpstreamClient", "UpstreamReply"]
