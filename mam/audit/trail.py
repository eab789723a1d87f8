"""Who did what to which agent: `record` appends one line per action to `.mam/audit.jsonl` (docs/trust.md, "The
audit trail"), `audited` records a command's call with its outcome, `read` gives the lines back.

A line is written whole with one write(2) on a descriptor opened O_APPEND, at most LINE_LIMIT bytes, so lines of
concurrent writers never tear or interleave; the file is renamed to `audit.jsonl.1` (and so on, KEEP files) at
ROTATE_AT bytes, under a lock. Neither `.mam` nor the file is followed when it is a symbolic link. A line that
cannot be written fails nothing: it is said on stderr (after the action's own error, when it failed)."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import functools
import hashlib
import inspect
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mam.util.errors import MamError
from mam.util.safefile import leads_inside, open_folder

NAME = "audit.jsonl"
LOCK = ".audit.lock"
LINE_LIMIT = 4096  # bytes, newline included: one write(2) of a regular file's O_APPEND is whole at this size
ROTATE_AT = 10 * 1024 * 1024  # bytes: audit.jsonl becomes audit.jsonl.1 (.1 becomes .2, ...)
KEEP = 3  # rotated files kept
ENV_KEYS = frozenset({"env_names", "env"})  # --env: a value is never written, only KEY=***
TEXT_KEYS = frozenset({"text"})  # typed text: never written, only its length and a hash prefix
CUT = 200  # characters kept of any other string argument
FACES = ("cli", "top", "serve", "skill")
RESULTS = ("ok", "refused", "failed")
# The outcome words of mam's documents over several agents (stop --all, restore) as a line's result: skipped and
# untrusted were declined; running (already alive) and left (a pane mam did not make, not closed) needed nothing.
OUTCOMES = {"stopped": "ok", "terminated": "ok", "left": "ok", "restored": "ok", "running": "ok",
            "failed": "failed", "skipped": "refused", "untrusted": "refused"}


@dataclass(frozen=True)
class Actor:
    """Who acts: the face (cli, top, serve, skill), the OS user, and for `mam serve` the client's address and
    the token's id (a hash prefix, never the token)."""

    face: str
    user: str
    client: str | None = None
    token_id: str | None = None


def os_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        try:
            import getpass

            return getpass.getuser()
        except Exception:  # no name for this uid: its number
            return str(os.getuid())


_ACTOR: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("mam_actor", default=None)


def current_actor() -> Actor:
    """The actor set by `acting`, else the CLI's (or a skill's, when its script set MAM_FACE=skill)."""
    actor = _ACTOR.get()
    if actor is not None:
        return actor
    return Actor("skill" if os.environ.get("MAM_FACE") == "skill" else "cli", os_user())


@contextlib.contextmanager
def acting(actor: Actor) -> Iterator[None]:
    token = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def words_kept(words: list[str]) -> dict[str, Any]:
    """A command line that may hold typed text (`mam exec -- tmux send-keys ... TEXT`): its first word that is not
    an option (the backend's command), how many words, and a hash prefix of them all; never the words."""
    command = next((w for w in words if not w.startswith("-")), None)
    joined = "\0".join(words).encode("utf-8", "surrogatepass")
    return {"command": command[:CUT] if command else None, "words": len(words),
            "sha256": hashlib.sha256(joined).hexdigest()[:12]}


def masked(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the line keeps them: typed text as its length and a hash prefix; --env values as ***;
    long strings cut; a mapping of them kept (one level); callables and other objects left out."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if key in TEXT_KEYS and isinstance(value, str):
            digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            out[key] = {"chars": len(value), "sha256": digest}
        elif isinstance(value, str):
            out[key] = value[:CUT] + ("..." if len(value) > CUT else "")
        elif value is None or isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, dict) and all(isinstance(k, str) for k in value):  # one level: words_kept
            out[key] = masked({k: v for k, v in value.items() if not isinstance(v, dict)})
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            if key in ENV_KEYS:  # --env NAME; a NAME=VALUE given by mistake keeps its name only
                value = [v.split("=", 1)[0] + "=***" if "=" in v else v for v in value]
            out[key] = [v[:CUT] for v in value[:20]] + (["..."] if len(value) > 20 else [])
    return out


def _cut(value: str | None, n: int) -> str | None:
    return value if value is None or len(value) <= n else value[:n] + "..."


def line_of(actor: Actor, action: str, agent: str | None, arguments: Mapping[str, Any], result: str,
            exit_code: int, message: str, now: float | None = None) -> bytes:
    """One line of the trail, at most LINE_LIMIT bytes: the arguments give way first, then every string field is
    cut shorter (escapes of control characters take up to six bytes each)."""
    now = time.time() if now is None else now
    first = message.splitlines()[0] if message and message.splitlines() else ""
    for key in ENV_KEYS & set(arguments):  # an --env value the command's own message quotes: masked there too
        for word in arguments[key] if isinstance(arguments[key], list | tuple) else ():
            value = word.partition("=")[2] if isinstance(word, str) else ""
            if value:
                first = first.replace(value, "***")
    kept: dict[str, Any] = masked(arguments)
    data = b""
    for n in (500, 200, 40):
        entry: dict[str, Any] = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "time": round(now, 3),
            "user": _cut(actor.user, n), "face": _cut(actor.face, n), "client": _cut(actor.client, n),
            "token_id": _cut(actor.token_id, n), "action": _cut(action, n),
            "agent": _cut(agent, 2 * n), "arguments": kept, "result": _cut(result, n), "exit": exit_code,
            "message": _cut(first, n)}
        data = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
        if len(data) <= LINE_LIMIT:
            return data
        kept = {"cut": True}
    return data  # 40 characters of 11 fields, escaped: under LINE_LIMIT whatever they hold


def open_dot_mam(dot_mam: Path, make: bool) -> int | None:
    """A descriptor of `.mam`, not followed when it is a symbolic link leading outside the workspace (refused:
    MamError): a clone can carry the link, and the trail would land wherever it points.
    Without `make`, None when there is no `.mam` (a reader never makes it). A link that stays inside the
    workspace is followed, as every command follows it (mam.config.workspace.check_dot_mam)."""
    if dot_mam.is_symlink() and leads_inside(dot_mam, dot_mam.parent):
        dot_mam = Path(os.path.realpath(dot_mam))
    if make:
        return open_folder(dot_mam, "workspace's .mam folder")
    try:
        return os.open(dot_mam, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and dot_mam.is_symlink():
            raise MamError("operation_failed", f"{dot_mam}: the workspace's .mam folder is a symbolic link: "
                           "refusing to follow it") from None
        raise MamError("operation_failed", f"{dot_mam}: cannot open: {exc.strerror}") from None


def open_file(dot: int, name: str, flags: int) -> int:
    """`name` in the folder `dot`, never through a symbolic link (ELOOP), never waiting on a FIFO planted in its
    place (O_NONBLOCK), and only a regular file of one link: else OSError."""
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=dot)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if info.st_nlink != 1:  # a hard link planted in its place: the line would land in another file too
            raise OSError(errno.EMLINK, "a file of several names (a hard link): not written")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _rotate(dot: int) -> None:
    """audit.jsonl -> .1 -> .2 ... (KEEP kept), under the lock, once: another writer may have rotated first."""
    lock = open_file(dot, LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if os.stat(NAME, dir_fd=dot, follow_symlinks=False).st_size < ROTATE_AT:
                return
        except FileNotFoundError:
            return
        for n in range(KEEP - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{NAME}.{n}", f"{NAME}.{n + 1}", src_dir_fd=dot, dst_dir_fd=dot)
        os.rename(NAME, f"{NAME}.1", src_dir_fd=dot, dst_dir_fd=dot)
    finally:
        os.close(lock)


def append(dot_mam: Path, data: bytes) -> None:
    """`data` (one line) at the end of DOT_MAM/audit.jsonl with one write(2), rotated first when it has grown to
    ROTATE_AT."""
    dot = open_dot_mam(dot_mam, make=True)
    assert dot is not None
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        fd = open_file(dot, NAME, flags)
        try:
            if os.fstat(fd).st_size >= ROTATE_AT:
                os.close(fd)
                fd = -1
                _rotate(dot)
                fd = open_file(dot, NAME, flags)
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.EIO, f"wrote {written} of {len(data)} bytes")
        finally:
            if fd >= 0:
                os.close(fd)
    finally:
        os.close(dot)


# Warnings of lines not written while the action itself failed: said after the action's error (its first line is
# what the user must read first: the CLI's error path says these after it, mam.cli.main._fail). Bounded.
HELD: list[str] = []
HELD_LIMIT = 20


def held() -> list[str]:
    """The warnings held back while an action failed, once: the caller says them after the action's error."""
    said = HELD[:]
    HELD.clear()
    return said


def record(mam_dir: Path, action: str, agent: str | None, arguments: Mapping[str, Any],
           result: str | Mapping[str, Any], exit_code: int = 0, message: str = "", hold: bool = False) -> None:
    """Append the action's line to `mam_dir`/audit.jsonl (the workspace's `.mam`), as the current actor's.
    `result` is ok, refused or failed (then `exit_code` and a one-line `message`), or a mapping of them:
    {"result": "failed", "exit": 1, "message": "..."}. A line that cannot be written fails nothing: it is said in
    one line on stderr."""
    try:
        if not isinstance(result, str):
            exit_code = int(result.get("exit", exit_code) or 0)
            message = str(result.get("message", message) or "")
            result = str(result.get("result", "ok"))
        append(mam_dir, line_of(current_actor(), action, agent, arguments, result, exit_code, message))
    except Exception as exc:  # the trail never fails the action it records
        why = exc.message if isinstance(exc, MamError) else (
            (exc.strerror or str(exc)) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError) and exc.errno in (errno.ELOOP, errno.ENOTDIR):
            why = "a symbolic link is in its place: not followed"
        warning = f"mam: warning: the audit line for {action} was not written to {mam_dir / NAME}: {why}\n"
        if hold:
            HELD[:] = (HELD + [warning])[-HELD_LIMIT:]
        else:
            sys.stderr.write(warning)


F = TypeVar("F", bound=Callable[..., Any])
# One line of a command's document: (agent, result, message); `each` gives them for a command over several agents.
Entry = tuple[str | None, str, str]


def _failure(exc: BaseException) -> tuple[str, int, str]:
    if isinstance(exc, MamError):
        return ("refused" if exc.refusal else "failed"), exc.exit_code, exc.message
    if isinstance(exc, KeyboardInterrupt):
        return "failed", 130, "interrupted"
    return "failed", 1, f"{type(exc).__name__}: {exc}"


def audited(action: str, agent: Callable[[Mapping[str, Any]], str | None] | None = None,
            unless: str | None = None, only_if: str | None = None,
            each: Callable[[dict[str, Any]], list[Entry]] | None = None,
            kept: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Callable[[F], F]:
    """Record each call of a command's document function (its first argument the App): its arguments, and ok
    with the document's message, or the error's result (refused when mam declined: MamError.refusal), exit code
    and message (then raised on). `agent` picks the agent from the bound arguments (default: `name`); `each`
    gives one line per agent from the document (a command over several agents: stop --all, restore --all,
    forget, prune); `kept` gives the arguments as the line keeps them (then `masked`); `unless` names a flag
    that makes the call change nothing (dry_run), `only_if` one without which it changes nothing (reconcile's
    apply): then no line."""
    def wrap(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs).arguments
            if (unless is not None and bound.get(unless)) or (only_if is not None and not bound.get(only_if)):
                return function(*args, **kwargs)
            app = args[0] if args else kwargs["app"]
            who = agent(bound) if agent is not None else bound.get("name")
            arguments = {k: v for k, v in bound.items() if k not in ("app", "name")}
            if kept is not None:
                arguments = kept(arguments)
            try:
                doc = function(*args, **kwargs)
            except BaseException as exc:
                result, code, said = _failure(exc)
                record(app.workspace.dot_mam, action, who, arguments, result, code, said,
                       hold=isinstance(exc, MamError))
                raise
            entries: list[Entry] = []
            if each is not None and isinstance(doc, dict):
                try:
                    entries = each(doc)
                except (KeyError, TypeError, ValueError):  # a document of another shape: the one line below
                    entries = []
            if not entries:
                message = doc.get("message") if isinstance(doc, dict) else None
                entries = [(who, "ok", str(message or ""))]
            for name, result, said in entries:
                record(app.workspace.dot_mam, action, name, arguments, result, 1 if result != "ok" else 0, said)
            return doc
        return run  # type: ignore[return-value]
    return wrap
