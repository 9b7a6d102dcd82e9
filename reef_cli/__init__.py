"""The ``reef`` command line: typer commands (one module per noun) and rich output.

Owns: argument parsing, human and ``--json`` output, exit codes (``exits.py``).
Does not own: any behaviour; every command calls ``reef_core`` (or a daemon through its client).
May import: ``reef_core``, typer, rich, click.  Never imported by ``reef_core``.
"""
