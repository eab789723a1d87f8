"""`mam skills install`: copy mam's agent skills (skills/ in the source, mam/_skills in a wheel) into a project.

A file already there that differs from mam's copy is the user's (an edit, or an older mam's version): it is
overwritten only with `force`, and without it nothing at all is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: the safe-file helpers load only when skills are installed.

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
    if target.stat().st_size != shipped.stat().st_size:
        return True  # never read a planted file of any size whole just to compare it
    return target.read_bytes() != shipped.read_bytes()


def _linked_folder(top: Path, target: Path) -> Path | None:
    """The first folder below `top` down to `target`'s own that is a symbolic link, or None."""
    folder = top
    for part in target.relative_to(top).parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            return folder
    return None


def _write(shipped: Path, dest_fd: int, dest: Path, target: Path) -> None:
    """Replace `target` by a copy of `shipped`: no folder on the way down from `dest` is followed through a link
    (refused), and a link at `target` itself is replaced, never written through."""
    from mam.util.safefile import open_folder, replace_in

    parts = target.relative_to(dest).parts
    fds = [dest_fd]
    try:
        folder = dest
        for part in parts[:-1]:
            folder = folder / part
            fds.append(open_folder(folder, "skill folder", parent_fd=fds[-1]))
        replace_in(fds[-1], parts[-1], shipped.read_bytes(), shipped.stat().st_mode & 0o777)
    finally:
        for fd in fds[1:]:
            os.close(fd)


def install_skills(dest: Path, force: bool = False, within: Path | None = None) -> list[Path]:
    """Copy each skill folder into `dest`, leaving files mam does not ship alone. Refuses (and writes nothing)
    when a file there differs from mam's, unless `force`, and always when `dest` or a folder in it is a symbolic
    link (mam never writes through one); so too a folder between `within` (the workspace, for the default
    `dest`) and `dest`, such as a linked `.agents`."""
    from mam.util.safefile import open_folder

    source = skills_source()
    top = within if within is not None else dest.parent
    try:
        pairs = _shipped(source, dest)
        linked = next((found for _, target in pairs if (found := _linked_folder(top, target))), None)
        if linked is not None:
            raise MamError("operation_failed", f"{linked}: a skill folder is a symbolic link: refusing to follow "
                           "it; nothing was written", hint="remove the link, or give another --dest")
        changed = [target for shipped, target in pairs if _differs(shipped, target)]
        if changed and not force:
            names = ", ".join(str(t.relative_to(dest)) for t in changed)
            raise MamError("operation_failed", f"{dest}: {len(changed)} file(s) differ from mam's and would be "
                                               f"overwritten: {names}; nothing was written",
                           hint="keep your changes elsewhere, then run 'mam skills install --force'")
        dest_fd = open_folder(dest, "skills folder")
        try:
            for shipped, target in pairs:
                if target in changed or not os.path.lexists(target) or \
                        target.stat().st_mode & 0o777 != shipped.stat().st_mode & 0o777:
                    _write(shipped, dest_fd, dest, target)  # the same file but another mode: a script must run
        finally:
            os.close(dest_fd)
    except OSError as exc:
        raise MamError("operation_failed", f"{dest}: cannot install the skills: {exc}") from None
    return sorted({dest / target.relative_to(dest).parts[0] for _, target in pairs})
