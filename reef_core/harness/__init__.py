"""Harness trees: the adapter-neutral artifact the reefine recipe evolves, and the seams to the harnesses.

| module   | owns |
|---|---|
| ``tree``   | entries, changes, the release manifest, well-formedness, diffs and the approval rule |
| ``render`` | the Renderer and Installer protocols, render targets, finding them by adapter name |
| ``health`` | the HealthCheck protocol (the real harness started on rendered files), its results |
| ``diff``   | file-by-file unified diffs between two trees (reviewer prompt, step page, review TUI) |

Owns: the tree as a value over ``dict[str, bytes]`` file maps, and the protocols adapters
implement (found by dotted reference, so reef_core never imports an adapter).  Pure: no git, no
network, no files, no processes.
Does not own: storing trees as commits (``reef_core.store``), screening their text
(``reef_core.release``), any one harness's layout or binary (``adapters/<name>/``).
May import: ``reef_core.errors``, ``reef_core.ids``, ``reef_core.sandbox`` (a type only: a health
run's confinement) and the standard library only.

The package's API is ``tree``'s whole ``__all__`` (imported with ``*``, so it is listed once,
there) and the names below from the other modules.
"""

from reef_core.harness import tree
from reef_core.harness.diff import FileDiff, diff_files, diff_text
from reef_core.harness.health import (
    HEALTH_CHECKS,
    HEALTH_TASK,
    HarnessBinary,
    HealthCheck,
    HealthResult,
    health_check_for,
    health_headers,
)
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
from reef_core.harness.tree import *  # noqa: F403

__all__ = [
    "ADAPTERS",
    "APIS",
    "HEALTH_CHECKS",
    "HEALTH_TASK",
    "INSTALLERS",
    "FileDiff",
    "HarnessBinary",
    "HealthCheck",
    "HealthResult",
    "InstallPlan",
    "Installer",
    "Renderer",
    "Target",
    "diff_files",
    "diff_text",
    "health_check_for",
    "health_headers",
    "installer_for",
    "renderer_for",
]
__all__ += tree.__all__
