"""`mam report STATE`: an agent's own hook says its state (docs/states.md, "Hooks").

It runs inside the agent's turn (Claude Code waits for its hooks), so it is the fast path of the entry point:
run before typer is imported (mam.cli.main_entry), it imports nothing heavier than the safe file helpers and
writes one small file, `.mam/reports/<agent>.json`, by a rename (a reader never sees half of one).

Outside a pane mam spawned (no $MAM_AGENT or $MAM_WORKSPACE) it does nothing and exits 0: the hooks are
installed for every session of the agent, most of which mam never started. It never exits 2, which an agent
reads as "block this action" (Claude Code, Gemini CLI): a failure to write is 1, a warning to the agent.
"""

from __future__ import annotations

import json
import os
import sys
import time

# Deferred imports (inside functions), for start-up: `mam report` is the hooks' fast path: the safe-file helpers load
# only when it writes.

STATES = ("working", "blocked", "idle", "done")
FOLDER = "reports"
# The variables that name the pane the hook runs in (each multiplexer's marker, e.g. tmux's $TMUX_PANE): taken by
# their ending, as the backends' own names live in their plugins, which this fast path never loads.
PANE_SUFFIXES = ("_PANE", "_PANE_ID")
MAX_ANCESTORS = 16  # a hook runs a few processes below the agent (its shell, a wrapper): enough to reach the pane's
SCHEMA = 1
# What an agent writes on the hook's stdin (Claude Code's and Codex's event as JSON) is read and dropped: a hook that
# leaves it unread can hold the agent, whose write waits once the pipe is full. Bounded in size, in silence (a stdin
# held open but never written to) and in all.
DRAIN_MAX = 16 * 1024 * 1024
DRAIN_IDLE = 0.5  # seconds without a byte: the agent has said all it will
DRAIN_TOTAL = 5.0  # seconds in all, however slowly it writes


def ancestors(start: int | None = None) -> list[int]:
    """The pids above this process, nearest first (Linux /proc; elsewhere just the parent). The pane's own
    process is one of them: a pane whose process is not has been restarted since the report."""
    pid = os.getppid() if start is None else start
    out: list[int] = []
    while pid > 1 and len(out) < MAX_ANCESTORS:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read(1024)
        except OSError:
            break
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
        fields = stat[stat.rfind(b")") + 2:].split()
        try:
            pid = int(fields[1])
        except (IndexError, ValueError):
            break
    return out


def valid_agent(name: str) -> bool:
    """An agent name as mam makes them (mam.util.names): it becomes a file name, so nothing else is taken."""
    return 0 < len(name) <= 64 and name[0].isascii() and name[0].isalnum() and all(
        c.isascii() and (c.isalnum() or c in "._-") for c in name)


def record(state: str, env: dict[str, str] | os._Environ[str], now: float | None = None) -> dict[str, object]:
    panes = {name: value for name, value in env.items() if name.endswith(PANE_SUFFIXES) and value and
             len(value) <= 200}
    return {"schema": SCHEMA, "agent": env.get("MAM_AGENT"), "state": state,
            "time": time.time() if now is None else now, "panes": panes, "pids": ancestors()}


def write(workspace: str, agent: str, document: dict[str, object]) -> None:
    """`.mam/reports/<agent>.json` of `workspace`, replaced whole; no folder on the way is a followed link."""
    from pathlib import Path

    from mam.util.safefile import replace_in

    root = Path(workspace)
    if not root.is_dir():
        raise OSError(f"$MAM_WORKSPACE {workspace}: not a directory")
    folder = reports_folder(root / ".mam", make=True)
    if folder is None:  # never: made, or refused with a MamError
        raise OSError(f"{root / '.mam' / FOLDER}: cannot open the reports folder")
    try:
        replace_in(folder, f"{agent}.json", (json.dumps(document) + "\n").encode(), 0o644)
    finally:
        os.close(folder)


def reports_folder(dot_mam: object, make: bool = False) -> int | None:
    """A descriptor of the reports folder of `dot_mam` (`.mam`), with neither `.mam` nor `reports` followed when
    it is a symbolic link: a repository can commit either as a link to a folder anyone may write, where a report
    would be anyone's. Writing, reading and removing reports all open it here, so they refuse the same links.
    With `make`, missing folders are made and a link is refused as operation_failed (MamError); without, None
    when either is missing, a link or not a folder (nothing is made: a query never writes)."""
    if make:
        from pathlib import Path

        from mam.util.safefile import open_folder

        dot_path = Path(str(dot_mam))
        dot = open_folder(dot_path, "workspace's .mam folder")
        try:
            return open_folder(dot_path / FOLDER, "reports folder", dot)
        finally:
            os.close(dot)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        dot = os.open(str(dot_mam), flags)
    except OSError:
        return None
    try:
        return os.open(FOLDER, flags, dir_fd=dot)
    except OSError:
        return None
    finally:
        os.close(dot)


def drain(fd: int = 0, limit: int = DRAIN_MAX, idle: float = DRAIN_IDLE, total: float = DRAIN_TOTAL) -> int:
    """Read `fd` (stdin) to its end and drop it: until EOF, `limit` bytes, `idle` seconds with nothing to read or
    `total` seconds. A terminal, or no stdin at all, is left alone. The bytes read."""
    try:
        if os.isatty(fd):
            return 0
    except OSError:
        return 0
    import select

    got = 0
    end = time.monotonic() + total
    while got < limit:
        wait = min(idle, end - time.monotonic())
        if wait <= 0:
            break
        try:
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                break
            chunk = os.read(fd, min(1 << 16, limit - got))
        except (OSError, ValueError):
            break
        if not chunk:
            break
        got += len(chunk)
    return got


def main(args: list[str]) -> int:
    """`mam report STATE [WORDS...]`: words after STATE are what the agent appends (Codex's notify adds its
    event as JSON) and are ignored, as is its stdin (Claude Code's and Codex's hooks write the event there),
    which is read to its end after the report is written (drain)."""
    try:
        return _report(args)
    finally:
        drain()


def _report(args: list[str]) -> int:
    if not args or args[0] not in STATES:
        got = repr(args[0][:40]) if args else "nothing"
        sys.stderr.write(f"mam: report takes a state: {', '.join(STATES)} (got {got})\n")
        return 1
    env = os.environ
    agent, workspace = env.get("MAM_AGENT", ""), env.get("MAM_WORKSPACE", "")
    if not agent or not workspace:
        return 0  # not an agent mam spawned: nothing to say, and nothing to complain about
    if not valid_agent(agent):
        sys.stderr.write("mam: report: $MAM_AGENT is not an agent name mam gives\n")
        return 1
    try:
        write(workspace, agent, record(args[0], env))
    except Exception as exc:  # a hook must never take the agent down: one line, exit 1
        sys.stderr.write(f"mam: report: could not write the report: {exc}\n"[:400])
        return 1
    return 0


def identity(spawn_env: bool, remote: bool, name: str, dot_mam: object) -> list[str]:
    """The variables spawn and restore give an agent so that its hooks' `mam report` knows whose state it says
    (NAME=VALUE). Only where the backend sets them out of the pane's command line (tmux, herdr) and the agent runs
    on this machine: a remote agent's report would land on its host, where no status reads it. The agent's old
    report is removed first: it spoke of a pane that is gone."""
    if not spawn_env or remote:
        return []
    from pathlib import Path

    dot = Path(str(dot_mam))
    remove_old(dot, name)
    return [f"MAM_AGENT={name}", f"MAM_WORKSPACE={dot.parent}"]


def remove_old(dot_mam: object, name: str) -> None:
    """Remove `.mam/reports/<name>.json` itself: a link there is unlinked, never its target, and neither `.mam`
    nor its reports folder is followed when it is a link (reports_folder: a report is never written there)."""
    folder = reports_folder(dot_mam)
    if folder is None:
        return
    try:
        os.unlink(f"{name}.json", dir_fd=folder)
    except OSError:
        pass
    finally:
        os.close(folder)
