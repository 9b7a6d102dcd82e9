"""reef's library: everything but the command line and the adapters.

| package / module | owns |
|---|---|
| ``errors``  | the one error tree |
| ``ids``     | scenario names and time-ordered item ids |
| ``config``  | settings: the only reader of files and environment |
| ``store``   | scenario git repositories (the only pygit2 user) |

Never imports ``reef_cli``, ``recipes`` or ``adapters``; no typer, rich or textual.
"""

import warnings

__version__ = "0.1.0"

# reef has no numpy and never converts through it; torch says it misses numpy when it loads
# and again when parts of it load later (three lines in every demo's daemon log), for nothing
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
