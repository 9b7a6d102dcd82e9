"""reef's library: everything but the command line and the adapters.

| package / module | owns |
|---|---|
| ``errors``   | the one error tree |
| ``ids``      | scenario names and time-ordered item ids |
| ``config``   | settings: the only reader of files and environment |
| ``jsonio``   | JSON on the proxy's path: orjson's speed with the json module's answers |
| ``hosts``    | which addresses are this machine's (loopback) |
| ``procs``    | child processes: a short probe, or a bounded run in its own process group |
| ``sandbox``  | the OS sandbox for unapproved code (bubblewrap), and the forwarder inside it |
| ``bridge``   | the sandbox's one way out: a bridge to the daemon's inference routes |
| ``memory``   | the process's peak resident memory over a span, and freed memory handed back |
| ``sessions`` | records grouped into a harness's sessions, and whose words each message holds |
| ``client``   | the typed HTTP client of a running daemon, and the one reading of an ask's outcome |
| ``wire``     | the OpenAI and Anthropic shapes, SSE, translation (pure) |
| ``upstream`` | what answers a model request: an HTTP upstream, or a model served in-process |
| ``models``   | local models reef serves and trains (torch's home) |
| ``store``    | scenario git repositories (the only pygit2 user) |
| ``harness``  | the adapter-neutral harness tree, and the seams adapters implement |
| ``release``  | screens, step pages, the release listing |
| ``learning`` | the recipe contract and the per-scenario worker |
| ``daemon``   | the aiohttp app: routes, auth, recording |

Never imports ``reef_cli``, ``recipes`` or ``adapters``; no typer, rich or textual.
May import: ``httpx``, ``orjson``, ``tomlkit`` (its top-level modules; each package says its own).
"""

import warnings

__version__ = "0.1.0"

# reef has no numpy and never converts through it; torch says it misses numpy when it loads
# and again when parts of it load later (three lines in every demo's daemon log), for nothing
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
