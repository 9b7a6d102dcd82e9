"""With ``storage.fsync``, a repack puts its new packs on disk before it removes what they replace.

A power loss cannot be staged here, so the test watches the order of the system calls a real
repack makes (strace, on a real scenario and the real git): every pack git made is fsynced, and
so is the folder that names it, before the first pack file is unlinked.  Without that order a
crash right after the unlink could leave the records only in a page cache that is gone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
from reef_core.store import Store, StoreOptions
store = Store(sys.argv[1], StoreOptions(pack_every=0, fsync=sys.argv[2] == "on"))
with store.open("s", create=True) as scenario:
    for n in range(6):
        scenario.append_sync("record", {"n": n, "text": "x" * 2000})
    scenario.packer.pack_now()
"""


STRACE = ["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,unlink,unlinkat"]


def _repack_under_strace(tmp_path: Path, fsync: str) -> tuple[list[str], Path]:
    state = tmp_path / f"state-{fsync}"
    trace = tmp_path / f"trace-{fsync}"
    subprocess.run(
        [*STRACE, "-o", str(trace), sys.executable, "-c", SCRIPT, str(state), fsync],
        check=True,
        capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return trace.read_text().splitlines(), state / "scenarios" / "s.git" / "objects" / "pack"


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is installed by scripts/setup.sh --dev")
def test_a_repack_fsyncs_its_packs_before_it_removes_anything(tmp_path: Path):
    lines, pack_dir = _repack_under_strace(tmp_path, "on")
    made_by_git = sorted(p.stem for p in pack_dir.glob("pack-*.rev"))
    assert made_by_git, "the repack made no pack"
    removals = [
        i
        for i, line in enumerate(lines)
        if re.search(r"unlink(at)?\(.*objects/pack/pack-\w+\.(pack|idx)", line)
    ]
    assert removals, "the repack removed none of the writer's packs: nothing to order"
    first_removal = removals[0]

    def fsynced_before(path: str) -> bool:
        return any(f"<{path}>" in line and "sync(" in line for line in lines[:first_removal])

    for name in made_by_git:
        for suffix in (".pack", ".idx"):
            assert fsynced_before(str(pack_dir / f"{name}{suffix}")), (
                f"{name}{suffix} not on disk before a removal"
            )
    assert fsynced_before(str(pack_dir)), "the pack folder's new names were not made durable first"


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is installed by scripts/setup.sh --dev")
def test_without_fsync_a_repack_fsyncs_nothing(tmp_path: Path):
    """The cost stays where it is asked for: storage.fsync=false repacks as before."""
    lines, pack_dir = _repack_under_strace(tmp_path, "off")
    assert list(pack_dir.glob("pack-*.rev"))
    assert not [line for line in lines if "objects/pack/pack-" in line and "sync(" in line]
