"""Translation between the OpenAI Chat Completions and Anthropic Messages dialects.

Requests, non-streaming responses and streams, in both directions: what lets Claude Code run
on an OpenAI-compatible upstream and an OpenAI client on an Anthropic one.  This module only
gathers the public names; each concept lives in its own module:

| module                    | owns |
|---|---|
| ``requests_to_anthropic`` | a Chat Completions request as a Messages request, ``DEFAULT_MAX_TOKENS`` |
| ``requests_to_openai``    | a Messages request as a Chat Completions request |
| ``responses``             | non-streaming responses, both ways |
| ``streams``               | streams, both ways, and ``UpstreamStreamError`` |
| ``content``               | what every direction writes alike: joined text, tool calls and their ids |
| ``outcome``               | stop reasons and token usage, both ways |
| ``shapes``                | checks on the incoming JSON, refusing with the field's path |

Does not own: the SSE framing (``sse``), stream assembly (``openai``/``anthropic``) or which
direction a route needs (the daemon decides).
"""

from __future__ import annotations

from reef_core.wire.requests_to_anthropic import DEFAULT_MAX_TOKENS, openai_request_to_anthropic
from reef_core.wire.requests_to_openai import anthropic_request_to_openai
from reef_core.wire.responses import anthropic_response_to_openai, openai_response_to_anthropic
from reef_core.wire.streams import AnthropicToOpenAIStream, OpenAIToAnthropicStream, UpstreamStreamError

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicToOpenAIStream",
    "OpenAIToAnthropicStream",
    "UpstreamStreamError",
    "anthropic_request_to_openai",
    "anthropic_response_to_openai",
    "openai_request_to_anthropic",
    "openai_response_to_anthropic",
]
