"""The ``reef`` command line: typer commands (one module per noun) and rich output.

| module | owns |
|---|---|
| ``main`` | the composed app, ``--debug``, one readable error line per failure |
| ``exits`` | reef's errors → exit codes (0 ok, 1 failure, 2 usage, 3 conflict) |
| ``output`` | the one rich Console (and the stderr one), ``--json`` |
| ``sources`` | where data comes from: the daemon at ``--url``, else the repositories (read-only) |
| ``state`` | ``--state-dir`` |
| ``serve``, ``demo`` | the daemon, and the guided demo |
| ``scenario``, ``status``, ``releases``, ``evolve``, ``report``, ``log``, ``export`` | one noun each |

Owns: argument parsing, human and ``--json`` output, exit codes (``exits.py``).
Does not own: any behaviour; every command calls ``reef_core``: a running daemon through
``reef_core.client``, or a scenario repository through ``reef_core.store``.
May import: ``reef_core``, typer, rich, click.  Never imported by ``reef_core``.
"""
