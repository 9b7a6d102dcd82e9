"""The store: every byte reef keeps, in one bare git repository per scenario.

| module          | owns |
|---|---|
| ``scenarios``   | the state directory: which scenarios exist, opening one to write or to read |
| ``repo``        | a bare repository: creation, the writer lock, compare-and-swap ref moves, clean-up |
| ``data``        | the data refs (records, reports, asks; one per node), read merged; message counts |
| ``items``       | an item as the data branch keeps it: checked, one line of JSON; ``RawJSON``, groups |
| ``writer``      | group commit: one writer thread per scenario, one ref move per batch of commits |
| ``packs``       | git objects written straight into one pack (and its index) per batch |
| ``scratch``     | files made before a commit needs them, so its critical path creates none |
| ``trees``       | every tree the store builds (from path → content maps, or in memory), read back |
| ``packer``      | background repacking, so a scenario stays compact as it grows |
| ``space``       | a full disk: one error, one log line a minute, one state per state directory |
| ``descriptors`` | running out of file descriptors, and capping libgit2's open packs |
| ``releases``    | the release chain and its tags, candidates, pending and rejected steps, their names |
| ``lfs``         | large files as git-lfs objects, written without git-lfs; the pointers in trees |
| ``installs``    | which harness adapters a scenario is installed for (its git config) |
| ``foreign``     | another program's git repository, read and never written (an import's source) |
| ``remotes``     | a scenario's git remotes: their config, running git and git-lfs against them |
| ``approvals``   | who approved a remote's release: approvals made here, ssh-signed approvals |
| ``sync``        | one sync with a remote, in order: fetch, adopt, push LFS objects, refs and chain |
| ``adopt``       | a sync's taking side: the fetch; adopting data refs, the chain, tags; superseding |
| ``push``        | a sync's giving side: LFS objects, refs, the chain (atomic, never forced); publishing |
| ``lineage``     | what a sync compares: commits one tip has that another lacks, tags, refs |
| ``sync_state``  | a sync's report, each remote's last sync (``reef-sync/``), what is unpushed |
| ``clone``       | a new node joining: a scenario made from a git remote, synced once |
| ``canary``      | a scenario's canary as git keeps it: one JSON state per commit on ``refs/reef/canary`` |

Owns: scenario repositories, the data refs (records, reports, asks; one per node), the release chain,
candidates and pending releases, LFS objects, crash recovery and packing, which harness adapters
each scenario is installed for, and a scenario's git remotes: syncing with them, publishing
through them, and joining from one (``remotes``, ``sync``, ``clone``).
Does not own: what a record or a release *means* (the daemon and recipes decide that).
May import: ``reef_core.errors``, ``reef_core.ids``, ``reef_core.jsonio``, ``pygit2`` (its only
home), ``orjson`` and the standard library.
"""

from reef_core.store.data import DATA_REF, NODE_DATA_PREFIX, DataReader, Item, data_ref, parse_trailers
from reef_core.store.descriptors import limit_open_packs, out_of_files
from reef_core.store.foreign import ForeignCommit, ForeignRepo
from reef_core.store.items import GroupEntry, GroupItem, RawJSON
from reef_core.store.lfs import GITATTRIBUTES, LfsPointer, parse_pointer, read_lfs, store_lfs
from reef_core.store.releases import (
    CANDIDATES_PREFIX,
    PENDING_PREFIX,
    REJECTED_PREFIX,
    RELEASE_REF,
    Candidate,
    Release,
    ReleaseChain,
    release_name,
    step_name,
)
from reef_core.store.scenarios import Scenario, ScenarioReader, Store, StoreOptions
from reef_core.store.trees import build_tree, iter_files

__all__ = [
    "CANDIDATES_PREFIX",
    "DATA_REF",
    "GITATTRIBUTES",
    "NODE_DATA_PREFIX",
    "PENDING_PREFIX",
    "REJECTED_PREFIX",
    "RELEASE_REF",
    "Candidate",
    "DataReader",
    "ForeignCommit",
    "ForeignRepo",
    "GroupEntry",
    "GroupItem",
    "Item",
    "LfsPointer",
    "RawJSON",
    "Release",
    "ReleaseChain",
    "Scenario",
    "ScenarioReader",
    "Store",
    "StoreOptions",
    "build_tree",
    "data_ref",
    "iter_files",
    "limit_open_packs",
    "out_of_files",
    "parse_pointer",
    "parse_trailers",
    "read_lfs",
    "release_name",
    "step_name",
    "store_lfs",
]
