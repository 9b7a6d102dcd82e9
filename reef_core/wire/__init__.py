"""The wire: the JSON and SSE shapes of the two LLM APIs reef speaks, and translation between them.

| module | owns |
|---|---|
| ``sse``       | server-sent-event framing: bytes to events and back |
| ``openai``    | Chat Completions: error bodies, stream assembly, the receipt chunk |
| ``anthropic`` | Messages: error bodies, stream assembly, the receipt on ``message_stop`` |
| ``translate`` | requests, responses and streams from one dialect to the other |
| ``models``    | model listings in both dialects, the ``count_tokens`` estimate |

Pure: no sockets, no files, no clock (a caller that wants ``created`` passes it in).
May import: ``reef_core.errors`` and the standard library only.

``error_body`` exists in both dialects, so it is not re-exported here: use
``reef_core.wire.openai.error_body`` or ``reef_core.wire.anthropic.error_body``.
"""

from reef_core.wire.anthropic import MessageStreamAssembler, parse_tool_input, with_receipt
from reef_core.wire.models import (
    anthropic_models_to_openai,
    estimate_input_tokens,
    openai_models_to_anthropic,
)
from reef_core.wire.openai import ChatStreamAssembler, receipt_chunk
from reef_core.wire.sse import SSEDecoder, SSEEvent, encode_event
from reef_core.wire.translate import (
    DEFAULT_MAX_TOKENS,
    AnthropicToOpenAIStream,
    OpenAIToAnthropicStream,
    UpstreamStreamError,
    anthropic_request_to_openai,
    anthropic_response_to_openai,
    openai_request_to_anthropic,
    openai_response_to_anthropic,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicToOpenAIStream",
    "ChatStreamAssembler",
    "MessageStreamAssembler",
    "OpenAIToAnthropicStream",
    "SSEDecoder",
    "SSEEvent",
    "UpstreamStreamError",
    "anthropic_models_to_openai",
    "anthropic_request_to_openai",
    "anthropic_response_to_openai",
    "encode_event",
    "estimate_input_tokens",
    "openai_models_to_anthropic",
    "openai_request_to_anthropic",
    "openai_response_to_anthropic",
    "parse_tool_input",
    "receipt_chunk",
    "with_receipt",
]
