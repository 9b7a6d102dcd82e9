"""Release: what stands between a candidate and a published release.

| module      | owns |
|---|---|
| ``screens`` | credential, instruction-override and chat-template screens over text and file maps |
| ``adoption`` | whether a release from a remote is served, held for a person, or refused |
| ``pages``   | the self-contained HTML page of a step, and the page keys that open it |
| ``listing`` | a scenario's releases and steps as one document (daemon and CLI), the approval question |
| ``evidence`` | how each release does in use: sessions, scores, latency, tokens, errors; two compared |
| ``intervals`` | the 95% intervals evidence gives: t, Wilson, Welch, Newcombe |
| ``sequential`` | the canary's always-valid sequential test: promote, retire, keep running, expire |

Owns: deciding whether content may be stored or published (release checks grow here), and how
releases and steps are shown to a person (the listing, the step page, each release's live evidence).
Does not own: the release chain itself (``reef_core.store``), what a recipe proposes (``recipes/``),
harness tree structure (``reef_core.harness``).
May import: ``reef_core.harness``, ``reef_core.store`` (the listing reads the chain, the steps and
each remote's state), ``reef_core.sessions`` and ``reef_core.wire`` (evidence reads sessions,
reports and token usage), ``reef_core.errors`` and the standard library.
"""

from reef_core.release.evidence import Evidence, compare, release_evidence, scenario_evidence
from reef_core.release.pages import StepView, page_key, page_path, render_step_page, request_page_path
from reef_core.release.screens import RULES, Hit, redact_credentials, screen_files, screen_text

__all__ = [
    "RULES",
    "Evidence",
    "Hit",
    "StepView",
    "compare",
    "page_key",
    "page_path",
    "redact_credentials",
    "release_evidence",
    "render_step_page",
    "request_page_path",
    "scenario_evidence",
    "screen_files",
    "screen_text",
]
