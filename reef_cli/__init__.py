"""The ``reef`` command line: typer commands (one module per noun) and rich output.

| module | owns |
|---|---|
| ``main`` | the composed app, ``--debug``, one readable error line per failure |
| ``exits`` | reef's errors → exit codes (0 ok, 1 failure, 2 usage, 3 conflict) |
| ``output`` | the one rich Console (and the stderr one), ``--json`` |
| ``sources`` | where data comes from: the daemon at ``--url``, else the repositories (read-only) |
| ``state`` | ``--state-dir`` |
| ``serve``, ``demo``, ``demo_user``, ``demo_canary`` | the daemon; the demo, its user, its canary view |
| ``interrupt`` | Ctrl-C for commands that poll the daemon: a flag, not an exception mid-request |
| ``scenario``, ``status``, ``releases``, ``evolve``, ``learn``, ``report`` | one noun each |
| ``compare`` | two releases side by side in use, with the difference and its interval |
| ``canary`` | the scenario's canary release: status, stop, promote |
| ``log``, ``export``, ``review``, ``install``, ``remote``, ``sync``, ``clone`` | one noun each |
| ``import_infra``, ``infra_source`` | ``reef import --from-reef-infra``; reading the original's state |
| ``tui`` | the review TUI |

Owns: argument parsing, human and ``--json`` output, exit codes (``exits.py``).
Does not own: any behaviour; every command calls ``reef_core``: a running daemon through
``reef_core.client``, or a scenario repository through ``reef_core.store``.
Never imported by ``reef_core``.
May import: ``reef_core``, ``typer``, ``rich``, ``click``, ``httpx``, ``uvloop``.
"""
