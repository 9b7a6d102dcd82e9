"""Clients for model endpoints.

Owns: talking HTTP to the configured upstream (OpenAI- or Anthropic-compatible), and turning
its failures into reef's errors (``UpstreamRejected``, ``UpstreamUnavailable``,
``UpstreamTimeout``) in exactly one place.
Does not own: formats (``reef_core.wire``) or recording (the daemon).
May import: aiohttp, ``reef_core.errors``, ``reef_core.config``.
"""

from reef_core.upstream.client import UpstreamClient, UpstreamReply
from reef_core.upstream.seam import Answerer, AnswerStream

__all__ = ["AnswerStream", "Answerer", "UpstreamClient", "UpstreamReply"]
