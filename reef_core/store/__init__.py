"""The store: every byte reef keeps, in one bare git repository per scenario.

Owns: scenario repositories, the data refs (records, reports, asks; one per node), the release chain,
candidates and pending releases, LFS objects, crash recovery and packing, and which harness
adapters each scenario is installed for (its repository's git config, ``installs.py``).
Does not own: what a record or a release *means* (the daemon and recipes decide that).
May import: ``reef_core.errors``, ``reef_core.ids``, pygit2 (its only home).
"""

from reef_core.store.data import DATA_REF, NODE_DATA_PREFIX, DataReader, Item, data_ref, parse_trailers
from reef_core.store.descriptors import limit_open_packs, out_of_files
from reef_core.store.foreign import ForeignCommit, ForeignRepo
from reef_core.store.lfs import GITATTRIBUTES, LfsPointer, parse_pointer, read_lfs, store_lfs
from reef_core.store.releases import (
    CANDIDATES_PREFIX,
    PENDING_PREFIX,
    REJECTED_PREFIX,
    RELEASE_REF,
    Candidate,
    Release,
    ReleaseChain,
)
from reef_core.store.scenarios import Scenario, ScenarioReader, Store, StoreOptions
from reef_core.store.trees import build_tree, iter_files
from reef_core.store.writer import GroupEntry, GroupItem, RawJSON

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
    "store_lfs",
]
