"""Install, uninstall and status over the kinds' files, each file on its own: one that cannot be parsed is left
alone and reported, the others go on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mam.hooks.common import (
    MAX_FILE,
    Change,
    KindFile,
    Unparsable,
    backup_path,
    diff,
    mode_of,
    read,
    refuse_link,
    write,
)
from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: the kinds' catalog loads only when every kind is meant.


def _read(kind: KindFile, env: Mapping[str, str]) -> tuple[str, str | None]:
    path = kind.path(env)
    return str(path), read(path)


def install(kind: KindFile, env: Mapping[str, str], dry_run: bool, named: bool = True) -> Change:
    """`named`: the user asked for this kind; else a kind whose settings folder is not there (the agent was
    never set up here) is skipped."""
    try:
        path = kind.path(env)
    except MamError as exc:
        return _nowhere(kind, exc)
    if not named and not path.parent.is_dir():
        return Change(kind.agent, str(path), "skipped", f"no folder {path.parent}: {kind.agent} is not set up here "
                      f"(name it with --agent {kind.agent} to install anyway)")
    try:
        refuse_link(path)
        text = read(path)
        if text is not None:
            found, full = kind.count(text)
            if found == full:
                return Change(kind.agent, str(path), "unchanged", "mam's hooks are already installed")
            if found:  # an older or partial install: taken out first, so that each entry is there once
                text_without = kind.remove(text)
            else:
                text_without = text
        else:
            text_without = None
        new = kind.add(text_without)
        if len(new.encode()) > MAX_FILE:  # mam could not read it back, to uninstall
            raise MamError("operation_failed", f"{path}: too large with mam's hooks (over {MAX_FILE} bytes)")
    except Unparsable as exc:
        return Change(kind.agent, str(path), "refused", f"cannot parse it, left alone: {exc}")
    except MamError as exc:
        return Change(kind.agent, str(path), "refused", exc.message)
    shown = diff(path, text, new)
    if dry_run:
        return Change(kind.agent, str(path), "would install", "would add mam's hooks", shown)
    try:
        if text is not None:  # the backup is as private as the file it keeps
            write(backup_path(path), text, mode_of(path))
        write(path, new)
    except (MamError, OSError) as exc:  # a folder where the backup goes, a folder made a link since: this file
        return Change(kind.agent, str(path), "refused", _failed(exc))
    saved = f" (backup: {backup_path(path)})" if text is not None else ""
    return Change(kind.agent, str(path), "installed", f"added mam's hooks{saved}", shown)


def uninstall(kind: KindFile, env: Mapping[str, str], dry_run: bool) -> Change:
    try:
        path = kind.path(env)
    except MamError as exc:
        return _nowhere(kind, exc)
    backup = backup_path(path)
    try:
        refuse_link(path)
        text = read(path)
        if text is None:
            return Change(kind.agent, str(path), "unchanged", "no such file: nothing to remove")
        if kind.count(text)[0] == 0:
            return Change(kind.agent, str(path), "unchanged", "mam's hooks are not in it")
        new = kind.remove(text)
        moved = kind.moved(text) if kind.moved is not None else 0
        # The backup install kept, when the file is that backup plus mam's entries: its bytes, exactly (an empty
        # file the user had, `{}`, is put back too, not removed as one mam made).
        saved = read_backup(backup)
        if saved is not None and _same(kind, saved, new):
            new = saved
    except Unparsable as exc:
        return Change(kind.agent, str(path), "refused", f"cannot parse it, left alone: {exc}")
    except MamError as exc:
        return Change(kind.agent, str(path), "refused", exc.message)
    shown = diff(path, text, new)
    # Codex keys trust and `enabled` by place: a group that moves is no longer trusted (or takes mam's `enabled`)
    warn = (f"; {moved} of the user's groups moved up their list: Codex keys a hook's trust by its place, so "
            "trust them again in Codex") if moved and new != saved else ""
    if dry_run:
        return Change(kind.agent, str(path), "would uninstall", "would remove mam's hooks" + warn, shown)
    try:
        write(path, new)
        if saved is not None and new == saved:
            write(backup, None)  # the file is that backup again
    except (MamError, OSError) as exc:
        return Change(kind.agent, str(path), "refused", _failed(exc))
    return Change(kind.agent, str(path), "uninstalled", ("removed mam's hooks" if new is not None else
                  "removed mam's hooks, and the file they alone were in") + warn, shown)


def _nowhere(kind: KindFile, exc: MamError, action: str = "refused") -> Change:
    """A kind whose file has no place ($HOME unset): said for that kind, the others (a $CODEX_HOME) go on."""
    return Change(kind.agent, "", action, exc.message, state="unreadable" if action == "status" else None)


def read_backup(path: Path) -> str | None:
    """The backup's text, None when there is none or it cannot be read (a FIFO, a folder): it only helps."""
    try:
        return read(path)
    except MamError:
        return None


def _failed(exc: MamError | OSError) -> str:
    return exc.message if isinstance(exc, MamError) else f"cannot write it: {exc.strerror or exc}"


def _same(kind: KindFile, saved: str, new: str | None) -> bool:
    """`saved` and `new` (None: no file) say the same: equal once both are written the way mam writes the file,
    and `saved` holds none of mam's entries (a backup that has them would put them back)."""
    try:
        return kind.count(saved)[0] == 0 and kind.remove(kind.add(saved)) == kind.remove(kind.add(new))
    except Unparsable:
        return False


# What status says for a state that needs no more words; the command line shows the state word alone instead.
PLAIN = {"installed": "mam's hooks are installed", "absent": "mam's hooks are not installed"}


def status(kind: KindFile, env: Mapping[str, str]) -> Change:
    try:
        path = kind.path(env)
    except MamError as exc:
        return _nowhere(kind, exc, "status")
    text: str | None = None
    try:
        text = read(path)
        if text is None:
            state, message = "absent", "no settings file"
        else:
            found, full = kind.count(text)
            state = "installed" if found == full else "partial" if found else "absent"
            message = PLAIN.get(state) or f"{found} of mam's {full} hooks are installed"
    except (Unparsable, MamError) as exc:
        reason = exc.message if isinstance(exc, MamError) else str(exc)
        state, message, text = "unreadable", f"cannot parse it: {reason}", None
    details = None
    if kind.notes is not None and state != "unreadable":
        try:
            words, details = kind.notes(text, env)
        except (Unparsable, MamError) as exc:  # the notes read another file (Codex: config.toml)
            words, details = f"; {exc.message if isinstance(exc, MamError) else exc}", None
        message += words
    return Change(kind.agent, str(path), "status", message, state=state, details=details)


def chosen(agents: Sequence[str]) -> list[KindFile]:
    """The kinds named (all that have hooks when none is): a kind without hooks, or unknown, is bad input."""
    from mam.hooks.catalog import WITHOUT_HOOKS, kinds

    known = kinds()
    words = [w.strip() for value in agents for w in value.split(",") if w.strip()]
    for word in words:
        if word in WITHOUT_HOOKS:
            raise MamError("usage", f"--agent {word}: {WITHOUT_HOOKS[word]}",
                           hint=f"mam reads its screen instead; kinds with hooks: {', '.join(known)}")
        if word not in known:
            raise MamError("usage", f"--agent {word[:40]!r}: not a kind mam knows hooks for",
                           hint=f"kinds with hooks: {', '.join(known)}")
    names = list(dict.fromkeys(words)) if words else list(known)
    return [kind for name in names for kind in known[name]]
