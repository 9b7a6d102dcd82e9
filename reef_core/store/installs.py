"""Which harness adapters a scenario is installed for, kept in its repository's git config.

Each install served for an adapter (``GET /reef/harness/install?adapter=…``) sets one key of the
scenario repository's own ``config`` file, one section per adapter::

    [reef-adapter "claude_code"]
        installed = 2025-06-01T12:00:00Z

Why there, and not in a commit or a file of reef's own:

* **durable**: the file lives in the repository, so the set survives a daemon restart and moves
  with the state directory;
* **no commit per install**: an install is not history (the data branch holds what sessions did,
  the release chain what was learned), and a person re-running an installer must not grow either;
* **safe together**: libgit2 writes the whole file under ``config.lock`` after reading it again,
  and each adapter has a key of its own, so two installs at once cannot lose each other (a single
  list key would need a read-modify-write); writers in this process take turns on a lock, and a
  lock file held by another process (``git config`` by a person) is waited for, briefly;
* **readable by people**: ``git config --get-regexp '^reef-adapter\\.'`` in the repository.

The value is the time of the latest install, for people; reef reads only which keys exist.  A
clone or push does not carry the config: which harnesses are installed is a fact about the
machines this daemon serves, not about the scenario's history.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pygit2

from reef_core.errors import InvalidInput
from reef_core.store.repo import repo_config, write_config

__all__ = ["installed_adapters", "note_install"]

_SECTION = "reef-adapter"
_VARIABLE = "installed"
_ADAPTER = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def installed_adapters(path: Path) -> frozenset[str]:
    """The adapters whose installer the scenario repository at ``path`` has served."""
    found = set()
    for entry in repo_config(path):
        section, _, rest = entry.name.partition(".")
        adapter, _, variable = rest.rpartition(".")
        if section == _SECTION and variable == _VARIABLE and _ADAPTER.match(adapter):
            found.add(adapter)
    return frozenset(found)


def note_install(path: Path, adapter: str, *, now: float | None = None) -> None:
    """Remember that an installer for ``adapter`` was served for the repository at ``path``."""
    if not isinstance(adapter, str) or not _ADAPTER.match(adapter):
        raise InvalidInput(f"adapter {adapter!r} is not an adapter name", field="adapter")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    key = f"{_SECTION}.{adapter}.{_VARIABLE}"

    def write(config: pygit2.Config) -> None:
        config[key] = stamp

    write_config(path, write, what=f"note the {adapter} install")
