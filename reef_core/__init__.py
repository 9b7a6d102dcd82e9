"""reef's library: everything but the command line and the adapters.

| package / module | owns |
|---|---|
| ``errors``  | the one error tree |
| ``ids``     | scenario names and time-ordered item ids |
| ``config``  | settings: the only reader of files and environment |
| ``store``   | scenario git repositories (the only pygit2 user) |

Never imports ``reef_cli``, ``recipes`` or ``adapters``; no typer, rich or textual.
"""

__version__ = "0.1.0"
