"""What each key of `mam top` (and each action of `mam serve`) does, through the code of the CLI command of the
same name. Imported only when a live face starts (mam/cli/top.py names the command alone), so no other command's
start-up pays for it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mam.live.topmodel import Group, TopRow
    from mam.registry import Registry
    from mam.servers.app import App

# Deferred imports (inside functions), for start-up: each action of the live view loads the core it runs when it is
# first taken.

PEEK_LINES = 40
# A row's fields that say how and when its agent ended (mam.agents.remains.end_of), besides its exit and lines.
END_FIELDS = ("ended_at", "stopped_at", "stop_requested_at", "restored_at", "spawn_failed")


F = TypeVar("F", bound=Callable[..., Any])


def as_top(action: F) -> F:
    """An action of the view, recorded in the audit trail as `mam top`'s (face top) whatever thread runs it."""
    import functools

    @functools.wraps(action)
    def run(*args: Any, **kwargs: Any) -> Any:
        from mam.audit.trail import Actor, acting, os_user

        with acting(Actor("top", os_user())):
            return action(*args, **kwargs)
    return run  # type: ignore[return-value]


class Actions:
    """What the view asks for, each through the code of the CLI command of the same name: the listing is
    `mam status --server S --host H`; `s` is `mam send NAME TEXT --enter`, `a` the same with --answer; `x` is
    `mam stop`; `r` is `mam restore NAME`; Enter is `mam exec -- attach-session` on tmux until `mam attach`
    exists."""

    def __init__(self, app: App, servers: tuple[str, ...] | list[str] = (), host: str | None = None) -> None:
        from mam.servers.hosts import checked_host, host_key

        self.app, self.servers = app, tuple(servers)
        self.host = None if host is None else host_key(checked_host(host))
        self._lock = threading.Lock()
        self._read: tuple[tuple[int, ...], Registry] | None = None  # the file's signature, and what it held
        app.plugins  # noqa: B018 - loaded here, once, before the poller's threads share it
        from mam.servers.availability import resolve_explicit_backend

        resolve_explicit_backend(app)

    def registered(self) -> list[dict[str, Any]]:
        """The registry's rows in scope (the explicit backend's, on --server and --host when given)."""
        from mam.agents.rows import rows_on

        rows = rows_on(self.app, self.registry(), None)
        return [{"name": r.name, "backend": r.backend, "server": r.server, "host": r.host or "", "status": r.status,
                 **(_end_of(r.raw) if not r.active else {})}
                for r in rows if (not self.servers or r.server in self.servers)
                and (self.host is None or (r.host or "") == self.host)]

    def fetch(self, group: Group) -> dict[str, Any]:
        """One group's status document: one listing call per server, its agents' states read with it."""
        from mam.agents.statusview import status_document

        server, host = group
        return status_document(self.app, [server], host=host or "local", registry=self.registry())

    def registry(self) -> Registry:
        """The registry, parsed again only when its file changed (another inode, size or time: mam replaces it
        by rename). Every server's call shares one parse: at 1,000 rows over 100 servers, a parse per call was
        three quarters of a refresh's CPU. A file that cannot be looked at is read every time (the read says why)."""
        path = self.app.workspace.registry_path
        with self._lock:
            try:
                st = os.stat(path)
            except OSError:
                self._read = None
                return self.app.load_registry()
            signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if self._read is None or self._read[0] != signature:
                self._read = (signature, self.app.load_registry())
            return self._read[1]

    def spawn_defaults(self) -> dict[str, str]:
        """What `n`'s form starts with: the server the first of the view's --server, else spawn's default; the
        directory the workspace root (none on --host: there it must be given)."""
        from mam.commands.lifecycle import default_server

        server = default_server(self.app, self.servers[0] if self.servers else None)
        return {"server": server, "cwd": "" if self.host else str(self.app.workspace.root)}

    @as_top
    def spawn(self, form: dict[str, str], ask: Callable[[dict[str, Any]], bool] | None = None) -> str:
        """`n`: `mam spawn NAME --agent KIND | --command CMD --server S --cwd DIR [--worktree [--branch B]]` from
        the form's fields, through its own code: the same checks and refusals. `ask` is the CLI's question at a
        terminal about a launch spec that holds the workspace's words (its entry: the argv it would run); without
        it such a spawn is refused. An empty server or directory is the default's (spawn_defaults); a relative
        directory is below the workspace root, `~` the user's home. A non-empty `worktree` field is --worktree,
        `branch` its --branch (refused without it, as the CLI refuses it)."""
        from mam.commands.lifecycle import spawn_document
        from mam.util.errors import MamError

        field = {key: (value or "").strip() for key, value in form.items()}
        name, branch = field.get("name", ""), field.get("branch", "")
        if branch and not field.get("worktree"):
            raise MamError("usage", "--branch is for --worktree", hint="tick worktree, or empty the branch")
        cwd = field.get("cwd") or None
        if self.host is None:  # here: below the workspace root, which an empty field is (spawn_defaults)
            root = str(self.app.workspace.root)
            cwd = os.path.join(root, os.path.expanduser(cwd)) if cwd else root
        doc = spawn_document(self.app, name, agent=field.get("agent") or None,
                             command=field.get("command") or None, server=field.get("server") or None, cwd=cwd,
                             args=[], host=self.host, ask=ask, worktree=branch if field.get("worktree") else None)
        s = doc["session"]
        made = f", branch {doc['worktree']['branch']}" if doc.get("worktree") else ""  # as the CLI says it
        return f"{s['name']} is {s['status']} on {s['backend']} server {s['server']} (cwd {s['cwd']}{made})"

    @as_top
    def send(self, row: TopRow, text: str) -> str:
        from mam.commands.interact import send_document

        return str(send_document(self.app, row.name, text, True, row.server, row.host or "local")["message"])

    @as_top
    def answer(self, row: TopRow, text: str) -> str:
        """`mam send NAME --answer TEXT --enter`: sent only while the agent is blocked (send refuses otherwise)."""
        from mam.commands.interact import send_document

        return str(send_document(self.app, row.name, text, True, row.server, row.host or "local",
                                 answer=True)["message"])

    @as_top
    def stop(self, row: TopRow) -> str:
        from mam.commands.lifecycle import stop_document

        doc = stop_document(self.app, row.name, row.server, host=row.host or "local")
        return f"{doc['name']}: {doc['status']} ({doc['message']})"

    @as_top
    def restore(self, row: TopRow) -> str:
        from mam.commands.restore import restore_document

        doc = restore_document(self.app, [row.name], server=row.server, host=row.host or "local")
        said = [f"{a['name']}: {a['outcome'].replace('_', ' ')}: {a['message']}" for a in doc["agents"]]
        return "; ".join(said) or f"{row.name}: nothing to restore"

    def peek(self, row: TopRow, lines: int = PEEK_LINES) -> list[str]:
        """The last `lines` lines of the agent's screen, as `mam peek NAME --lines N` prints them."""
        from mam.agents.peeking import peek_document

        return list(peek_document(self.app, row.name, lines, row.server, row.host or "local")["lines"])

    def attach_command(self, row: TopRow) -> tuple[str, list[str], dict[str, str]]:
        """The program, argv and environment of the client `mam attach NAME` runs (tmux switches the client top
        runs in when that is on the agent's server)."""
        import os
        import sys

        from mam.agents.peeking import attach_command

        try:
            tty: str | None = os.ttyname(sys.stdin.fileno())
        except (OSError, ValueError):
            tty = None
        command = attach_command(self.app, row.name, row.server, row.host or "local", tty)
        return command.program, command.argv, command.env


def _end_of(raw: dict[str, Any]) -> dict[str, Any]:
    """What the row keeps of how its agent ended (its last lines cleaned as every quoted line is), and the fields
    by which `mam status` tells that end (mam.agents.remains.end_of), which the view tells the same way."""
    from mam.agents.rows import history

    kept = history(raw)
    return {"exit_status": kept["exit_status"], "exit_signal": kept["exit_signal"], "last_output": kept["last_output"],
            **{k: raw[k] for k in END_FIELDS if k in raw}}


def attach(program: str, argv: list[str], env: dict[str, str]) -> int:
    """Run the attaching client in this terminal until it detaches (the view is suspended meanwhile)."""
    import subprocess

    # No time limit: a person is using it; it ends when they detach.
    return subprocess.run(argv, executable=program, env=env, check=False).returncode  # noqa: S603 - exec's argv

