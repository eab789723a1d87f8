"""`mam skills install`: copy mam's agent skills (skills/ in the source, mam/_skills in a wheel) into a project.

A file already there that differs from mam's copy is the user's (an edit, or an older mam's version): it is
overwritten only with `force`, and without it nothing at all is written.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mam.errors import MamError

DEFAULT_DEST = Path(".agents") / "skills"


def skills_source() -> Path:
    package = Path(__file__).resolve().parents[1]  # mam/
    for candidate in (package / "_skills", package.parent / "skills"):
        if candidate.is_dir():
            return candidate
    raise MamError("operation_failed", "mam's skills are missing from this installation",
                   hint="reinstall mam")


def _shipped(source: Path, dest: Path) -> list[tuple[Path, Path]]:
    """(mam's file, where it goes) for every file of every skill."""
    pairs = []
    for skill in sorted(p for p in source.iterdir() if (p / "SKILL.md").is_file()):
        for path in sorted(skill.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                pairs.append((path, dest / skill.name / path.relative_to(skill)))
    return pairs


def _differs(shipped: Path, target: Path) -> bool:
    """True when `target` exists and is not mam's file: other content, or a link, a folder, ... in its place."""
    if not os.path.lexists(target):
        return False
    if target.is_symlink() or not target.is_file():
        return True
    return target.read_bytes() != shipped.read_bytes()


def _write(shipped: Path, target: Path) -> None:
    """Replace `target` by a copy of `shipped` (a link in its place is replaced, never written through)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(shipped.read_bytes())
        os.chmod(tmp, shipped.stat().st_mode & 0o777)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def install_skills(dest: Path, force: bool = False) -> list[Path]:
    """Copy each skill folder into `dest`, leaving files mam does not ship alone. Refuses (and writes nothing)
    when a file there differs from mam's, unless `force`."""
    source = skills_source()
    try:
        pairs = _shipped(source, dest)
        changed = [target for shipped, target in pairs if _differs(shipped, target)]
        if changed and not force:
            names = ", ".join(str(t.relative_to(dest)) for t in changed)
            raise MamError("operation_failed", f"{dest}: {len(changed)} file(s) differ from mam's and would be "
                                               f"overwritten: {names}; nothing was written",
                           hint="keep your changes elsewhere, then run 'mam skills install --force'")
        for shipped, target in pairs:
            if target in changed or not os.path.lexists(target):
                _write(shipped, target)
            elif target.stat().st_mode & 0o777 != shipped.stat().st_mode & 0o777:
                os.chmod(target, shipped.stat().st_mode & 0o777)  # the same file, but a script must run
    except OSError as exc:
        raise MamError("operation_failed", f"{dest}: cannot install the skills: {exc}") from None
    return sorted({dest / target.relative_to(dest).parts[0] for _, target in pairs})
