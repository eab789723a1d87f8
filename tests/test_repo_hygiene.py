"""What a merge can leave behind by mistake: a `.orig`/`.rej` copy of a file, or conflict markers in a source
file (a file that still parses as a document can carry them unseen)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^(<{7}|>{7}) |^={7}$", re.MULTILINE)


def tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, timeout=30,
                            check=True)
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_no_merge_leftovers_are_tracked() -> None:
    assert [name for name in tracked() if name.endswith((".orig", ".rej", ".BACKUP", ".LOCAL", ".REMOTE"))] == []


def test_no_conflict_markers_in_text_files() -> None:
    marked = []
    for name in tracked():
        if not name.endswith((".py", ".md", ".yaml", ".toml", ".json", ".sh")) and "/fakes/" not in name:
            continue
        text = (ROOT / name).read_text(errors="replace")
        if MARKER.search(text):
            marked.append(name)
    assert marked == []
