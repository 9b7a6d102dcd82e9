"""Which harness adapters a scenario is installed for, kept in its repository's git config.

Each install noted for an adapter (``POST /reef/harness/installed`` once its script ran, or the
harness's first recorded request: ``reef_core/daemon/install_routes.py``) sets one key of the
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

The value is the time of the latest install, for people; reef reads only which keys exist.

A clone or a push does not carry the config, so each install also sets a ref,
``refs/reef/installed/<adapter>`` (at the empty blob: it never changes, so two nodes' pushes of
it never clash), which a sync pushes and a fetch brings to the other nodes as
``refs/remotes/<remote>/reef/installed/<adapter>``.  A scenario is installed for the adapters
named by its config, its own refs, and those its remotes brought: a candidate is checked for
every harness any node serves, and a node that joined by ``reef clone`` knows them at once.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pygit2

from reef_core.errors import InvalidInput
from reef_core.store.repo import create_ref_exclusive, ref_names, repo_config, write_config

__all__ = ["INSTALLED_PREFIX", "installed_adapters", "note_install"]

_SECTION = "reef-adapter"
_VARIABLE = "installed"
_ADAPTER = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_REF_PART = "reef/installed/"
INSTALLED_PREFIX = f"refs/{_REF_PART}"


def installed_adapters(path: Path) -> frozenset[str]:
    """The adapters the scenario repository at ``path`` is noted installed for, here or on
    a node whose refs a fetch brought (see the module's docstring)."""
    found = set()
    prefixes = [INSTALLED_PREFIX]
    for entry in repo_config(path):
        section, _, rest = entry.name.partition(".")
        name, _, variable = rest.rpartition(".")
        if section == _SECTION and variable == _VARIABLE and _ADAPTER.match(name):
            found.add(name)
        elif section == "remote" and variable == "url":
            prefixes.append(f"refs/remotes/{name}/{_REF_PART}")
    for prefix in prefixes:
        for ref in ref_names(path, prefix):
            adapter = ref[len(prefix) :]
            if _ADAPTER.match(adapter):
                found.add(adapter)
    return frozenset(found)


def note_install(path: Path, adapter: str, *, now: float | None = None) -> None:
    """Remember that the installer for ``adapter`` ran for the repository at ``path``."""
    if not isinstance(adapter, str) or not _ADAPTER.match(adapter):
        raise InvalidInput(f"adapter {adapter!r} is not an adapter name", field="adapter")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    key = f"{_SECTION}.{adapter}.{_VARIABLE}"

    def write(config: pygit2.Config) -> None:
        config[key] = stamp

    write_config(path, write, what=f"note the {adapter} install")
    repo = pygit2.Repository(str(path))
    try:
        create_ref_exclusive(repo, f"{INSTALLED_PREFIX}{adapter}", repo.create_blob(b""), "install")
    finally:
        repo.free()
