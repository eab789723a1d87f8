"""The README's test command is the one CI runs, so the time the README gives is the time CI takes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m pytest")]
    readme = (ROOT / "README.md").read_text()
    shown = re.findall(r"^python3 -m pip install -e '\.\[test\]' && (python3 -m pytest[^\n]*)$", readme, re.M)
    assert len(ci) == 1 and shown == ci, (ci, shown)
    assert f"`{ci[0]}` is the exact command `.ci/run`" in readme.replace("\n", " ")
