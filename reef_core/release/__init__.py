"""Release: what stands between a candidate and a published release.

| module      | owns |
|---|---|
| ``screens`` | credential, instruction-override and chat-template screens over text and file maps |
| ``pages``   | the self-contained HTML page of a step, and the page keys that open it |
| ``listing`` | a scenario's releases and steps as one document (daemon and CLI), the approval question |

Owns: deciding whether content may be stored or published (release checks grow here), and how
releases and steps are shown to a person (the listing, the step page).
Does not own: the release chain itself (``reef_core.store``), what a recipe proposes (``recipes/``),
harness tree structure (``reef_core.harness``).
May import: ``reef_core.harness``, ``reef_core.store`` (the listing reads the chain, the steps and
each remote's state), ``reef_core.errors`` and the standard library.
"""

from reef_core.release.pages import StepView, page_key, page_path, render_step_page, request_page_path
from reef_core.release.screens import RULES, Hit, redact_credentials, screen_files, screen_text

__all__ = [
    "RULES",
    "Hit",
    "StepView",
    "page_key",
    "page_path",
    "redact_credentials",
    "render_step_page",
    "request_page_path",
    "screen_files",
    "screen_text",
]
