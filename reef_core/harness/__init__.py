"""Harness trees: the adapter-neutral artifact the reefine recipe evolves, and the seam to render it.

| module   | owns |
|---|---|
| ``tree``   | entries, changes, the release manifest, well-formedness, diffs and the approval rule |
| ``render`` | the Renderer and Installer protocols, render targets, finding them by adapter name |
| ``diff``   | file-by-file unified diffs between two trees (reviewer prompt, step page, review TUI) |

Owns: the tree as a value over ``dict[str, bytes]`` file maps. Pure: no git, no network, no files.
Does not own: storing trees as commits (``reef_core.store``), screening their text
(``reef_core.release``), any one harness's layout (``adapters/<name>/render.py``).
May import: ``reef_core.errors``, ``reef_core.ids`` and the standard library only.
"""

from reef_core.harness.diff import FileDiff, diff_files, diff_text
from reef_core.harness.render import (
    ADAPTERS,
    APIS,
    INSTALLERS,
    Installer,
    InstallPlan,
    Renderer,
    Target,
    installer_for,
    renderer_for,
)
from reef_core.harness.tree import (
    APPROVAL_CONFIG_KEYS,
    KINDS,
    MANIFEST_PATH,
    MAX_ENTRIES,
    MAX_ENTRY_BYTES,
    OPS,
    REEF_OWNED_CONFIG_KEYS,
    Change,
    Entry,
    Frontmatter,
    HarnessTree,
    Manifest,
    TreeError,
    approval_changes,
    changed_entries,
    is_reserved,
    needs_approval,
    parse_frontmatter,
    summarize_changes,
)

__all__ = [
    "ADAPTERS",
    "APIS",
    "APPROVAL_CONFIG_KEYS",
    "INSTALLERS",
    "KINDS",
    "MANIFEST_PATH",
    "MAX_ENTRIES",
    "MAX_ENTRY_BYTES",
    "OPS",
    "REEF_OWNED_CONFIG_KEYS",
    "Change",
    "Entry",
    "FileDiff",
    "Frontmatter",
    "HarnessTree",
    "InstallPlan",
    "Installer",
    "Manifest",
    "Renderer",
    "Target",
    "TreeError",
    "approval_changes",
    "changed_entries",
    "diff_files",
    "diff_text",
    "installer_for",
    "is_reserved",
    "needs_approval",
    "parse_frontmatter",
    "renderer_for",
    "summarize_changes",
]
