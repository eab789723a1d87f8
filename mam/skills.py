"""`mam skills install`: copy mam's agent skills (skills/ in the source, mam/_skills in a wheel) into a project."""

from __future__ import annotations

import shutil
from pathlib import Path

from mam.errors import MamError

DEFAULT_DEST = Path(".agents") / "skills"


def skills_source() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_skills", here.parent / "skills"):
        if candidate.is_dir():
            return candidate
    raise MamError("operation_failed", "mam's skills are missing from this installation",
                   hint="reinstall mam")


def install_skills(dest: Path) -> list[Path]:
    """Copy each skill folder into `dest`, replacing mam's own files and leaving any others alone."""
    source = skills_source()
    written = []
    try:
        for skill in sorted(p for p in source.iterdir() if (p / "SKILL.md").is_file()):
            target = dest / skill.name
            shutil.copytree(skill, target, dirs_exist_ok=True)
            written.append(target)
    except OSError as exc:
        raise MamError("operation_failed", f"{dest}: cannot install the skills: {exc}") from None
    return written
