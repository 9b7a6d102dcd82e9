"""The wire: the JSON and SSE shapes of the LLM APIs reef speaks, and translation between them.

| module                    | owns |
|---|---|
| ``sse``                   | server-sent-event framing: bytes to events and back |
| ``openai``                | Chat Completions: error bodies, stream assembly, the receipt chunk |
| ``anthropic``             | Messages: error bodies, stream assembly, the receipt on ``message_stop`` |
| ``requests_to_anthropic`` | a Chat Completions request as a Messages request |
| ``requests_to_openai``    | a Messages request as a Chat Completions request |
| ``responses``             | non-streaming responses from one dialect to the other, both ways |
| ``streams``               | streams from one dialect to the other, both ways |
| ``content``               | what every translation writes alike: joined text, tool calls and their ids |
| ``outcome``               | stop reasons and token usage in both dialects |
| ``shapes``                | checks on incoming JSON, refusing with the field's path |
| ``translate``             | the translation names above, gathered in one module |
| ``models``                | model listings in both dialects, the ``count_tokens`` estimate |
| ``responses_api``         | ``/v1/responses``: its requests as chat, chat answers as Response objects |
| ``responses_stream``      | chat streams as Responses events, Responses streams assembled, the receipt |

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
from reef_core.wire.requests_to_anthropic import DEFAULT_MAX_TOKENS, openai_request_to_anthropic
from reef_core.wire.requests_to_openai import anthropic_request_to_openai
from reef_core.wire.responses import anthropic_response_to_openai, openai_response_to_anthropic
from reef_core.wire.sse import SSEDecoder, SSEEvent, encode_event
from reef_core.wire.streams import AnthropicToOpenAIStream, OpenAIToAnthropicStream, UpstreamStreamError

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
