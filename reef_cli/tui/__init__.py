"""The review TUI (``reef review``): Textual's only home in reef.

| module          | owns                                                                        |
|-----------------|-----------------------------------------------------------------------------|
| ``app``         | the app: bindings, workers, state handed down to the widgets                |
| ``model``       | what is shown, read from the repositories (plain values, no textual)        |
| ``scores``      | mean report score per release, read incrementally                           |
| ``operator``    | approve, reject, roll back, end a canary, page links: by the daemon, or not |
| ``canary``      | a scenario's canary: how each went, its lines from the daemon or from git   |
| ``watch``       | when to reload: watchfiles on the repositories' refs                        |
| ``tree``        | the left-hand tree of scenarios, canaries, candidates and releases          |
| ``detail``      | the right-hand pane: ask, design, checks, per-file diff; a canary's lines   |
| ``score_line``  | the score sparkline                                                         |
| ``confirm``     | the yes/no question before an operation                                     |

May import: ``textual``, ``rich``, ``watchfiles``, ``reef_cli.output``, ``reef_cli.canary`` (the
lines ``reef canary S status`` prints), and of reef_core ``reef_core.client``, ``reef_core.store``,
``reef_core.release``, ``reef_core.harness``, ``reef_core.errors``.
"""

from reef_cli.tui.app import ReviewApp

__all__ = ["ReviewApp"]
