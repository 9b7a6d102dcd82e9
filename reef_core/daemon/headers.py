"""What a request's own headers say besides its scenario: whether to record it
(``x-reef-capture``), its tags (``x-reef-tag-<name>``, and a harness's own session header as the
``session`` tag), and which harness sent it (``x-reef-harness``, else the harness's own marks)."""

from __future__ import annotations

from aiohttp import web

from reef_core.errors import InvalidInput

__all__ = ["HARNESSES", "captured", "harness_of", "tags_of"]


def captured(request: web.Request) -> bool:
    raw = request.headers.get("x-reef-capture")
    if raw is None:
        return True
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidInput(f"x-reef-capture must be true or false, got {raw!r}", field="x-reef-capture")
    return value == "true"


def tags_of(request: web.Request) -> dict[str, str]:
    """The client's ``x-reef-tag-<name>`` headers; a harness's own session header (Claude Code's
    ``x-claude-code-session-id``, Codex's ``session-id``, opencode's ``x-session-id``) becomes the
    ``session`` tag (unless the client sent one), so its records group by the harness's session
    even when its launcher tags them with its run too."""
    prefix = "x-reef-tag-"
    tags = {
        name[len(prefix) :].lower(): value
        for name, value in request.headers.items()
        if name.lower().startswith(prefix) and len(name) > len(prefix) and value
    }
    claude = request.headers.get("x-claude-code-session-id")
    if claude:
        tags.setdefault("session", claude)
    codex = request.headers.get("session-id")
    if codex and _is_codex(request):
        tags.setdefault("session", codex)
    opencode = request.headers.get("x-session-id")
    if opencode and _is_opencode(request):
        tags.setdefault("session", opencode)
    return tags


def _is_codex(request: web.Request) -> bool:
    """Codex CLI sent it: reef's Codex provider names it, else Codex's own ``originator``."""
    named = request.headers.get("x-reef-harness", "").strip().lower()
    return named == "codex" or request.headers.get("originator", "").startswith("codex")


def _is_opencode(request: web.Request) -> bool:
    """opencode sent it: reef's opencode provider names it, else opencode's own user agent."""
    named = request.headers.get("x-reef-harness", "").strip().lower()
    return named == "opencode" or request.headers.get("user-agent", "").startswith("opencode/")


#: the harnesses a record can name (``x-reef-harness``), as reef's adapters are called
HARNESSES = ("pi", "claude_code", "codex", "opencode")


def harness_of(request: web.Request) -> str:
    """Which harness sent the request, for the record's ``harness``: the ``x-reef-harness``
    header (reef's pi models.json sends it; a value other than :data:`HARNESSES` is refused),
    else Claude Code by its own session header or user agent, else ``unknown`` (the replay
    then renders the session with the recipe's configured adapter)."""
    named = request.headers.get("x-reef-harness")
    if named is not None:
        value = named.strip().lower()
        if value not in HARNESSES:
            raise InvalidInput(
                f"x-reef-harness must be one of {', '.join(HARNESSES)}, got {named!r}", field="x-reef-harness"
            )
        return value
    agent = request.headers.get("user-agent", "")
    if request.headers.get("x-claude-code-session-id") or agent.startswith("claude-cli/"):
        return "claude_code"
    if _is_codex(request):
        return "codex"
    if _is_opencode(request):
        return "opencode"
    return "unknown"
