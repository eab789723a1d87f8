"""Driving tmux (3.2 or later). Every call has `-L NAME`; every query has `-N`, so none starts a server.

Hostile text both ways. What mam hands tmux goes literally: tmux expands `#` formats in some arguments and reads
an argument ending in `;` as a command separator. What comes back is escaped by tmux itself, so that no field a
pane controls (its directory, an option it sets) can end a field or a record of the listing.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Mapping

from mam.api import (
    Agent,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    PaneCapture,
    Remains,
    SendResult,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
    first_line,
    net_namespaces,
    open_text_log,
    parse_or_failure,
    poll_until,
    read_text,
    run,
    sent_message,
)
from mam_tmux import MARKERS  # declared once, for the BackendSpec (plugin.py) and the backend

EXECUTABLE = "tmux"
SEP = "\x1f"  # unit separator between fields; a record ends with a newline
# The session that holds an otherwise empty server up. Its leading "_" is not a valid mam name, so it can
# never be confused with an agent; it is never listed.
KEEPALIVE = "_mam_keepalive"
# A new agent is watched this long: a program that ends within it "exited at once", and its spawn fails with
# the reason instead of leaving a row that says running.
EXIT_WINDOW = 0.3
POLL_INTERVAL = 0.05


def _escaped(field: str) -> str:
    """`#{field}` with a backslash put before each backslash, newline and separator, by tmux's own regex
    substitution: a listing of escaped fields splits on bare separators and newlines only."""
    return "#{s/([\\\n" + SEP + "])/\\\\\\1/:" + field + "}"


# Ids and numbers tmux makes itself go as they are; text anyone can set (a name, an option, a path) escaped.
LIST_FORMAT = SEP.join(["#{session_id}", _escaped("session_name"), "#{window_index}", "#{pane_index}",
                        "#{pane_id}", "#{pane_pid}", "#{pane_dead}", _escaped("@mam_agent"),
                        _escaped("pane_current_path"), _escaped("@mam_pane")])
_TEXT = r"([^\\\n\x1f]*(?:\\[\\\n\x1f][^\\\n\x1f]*)*)"  # plain characters and the three escapes only
_RECORD = re.compile(rf"(\$[0-9]+){SEP}{_TEXT}{SEP}([0-9]+){SEP}([0-9]+){SEP}(%[0-9]+){SEP}([0-9]+){SEP}([01]){SEP}"
                     rf"{_TEXT}{SEP}{_TEXT}{SEP}{_TEXT}\n")
# A pane's end, as remain-on-exit keeps it: dead or not, its exit status, or the signal that killed it.
PANE_STATE = SEP.join(["#{pane_id}", "#{pane_dead}", "#{pane_dead_status}", "#{pane_dead_signal}"])
_PANE_ID = re.compile(r"%[0-9]+")
# Every pane of the server, for the remains of ended agents: its session's name and the agent's own pane
# (@mam_pane) escaped, then how the pane ended.
REMAINS_FORMAT = SEP.join([_escaped("session_name"), "#{pane_id}", "#{pane_dead}", "#{pane_dead_status}",
                           "#{pane_dead_signal}", "#{pane_dead_time}", _escaped("@mam_pane")])
_REMAINS_RECORD = re.compile(rf"{_TEXT}{SEP}(%[0-9]+){SEP}([01]){SEP}([0-9]*){SEP}([0-9]*){SEP}([0-9]*){SEP}{_TEXT}\n")
REMAINS_LINES = 20  # the last lines of an ended pane that are kept
_DEAD_LINE = re.compile(r"Pane is dead \((?:status (?P<status>[0-9]+)|signal (?P<signal>[0-9]+))[,)]")
REMAINS_HISTORY = "-200"  # how far back in its history capture-pane looks for them
# tmux sends a command's arguments to its server in one message of at most 16 KiB ("command too long" past it):
# a longer text goes through a buffer loaded from stdin.
SEND_KEYS_MAX = 8192
_SESSION_ID = re.compile(r"\$[0-9]+")
# A session's id, and "mam" when mam made it (its @mam_pane is set); then, for if-shell -F, true when no pane of
# any of its windows is alive.
_REMAINS_FORMAT = "#{session_id}" + SEP + "#{?@mam_pane,mam,}"
_ALL_DEAD = "#{==:#{W:#{P:#{?pane_dead,,x}}},}"
# Each pane of a session before a stop: the session's id, "mam" when mam made it, whether the pane is dead.
_STOP_FORMAT = SEP.join(["#{session_id}", "#{?@mam_pane,mam,}", "#{pane_dead}"])
FOREIGN = "mam-foreign"  # what the stop prints when the session's mark went between its look and its close
# Seconds after its session was made that an agent's output is its start-up screen: a session no client ever
# attached to was last looked at then (its spawn), so an agent that drew its prompt and did nothing since is
# `idle`, and `done` only once it has written more after that (docs/states.md, "Done").
STARTUP_SECONDS = 10
# When a client last looked at the session: its last attach, else (never attached) the end of its start-up.
_LAST_LOOK = ("#{?session_last_attached,#{session_last_attached},"
              f"#{{e|+:#{{session_created}},{STARTUP_SECONDS}}}}}")
# What tmux knows of a pane for its state, printed before its capture: ids and numbers as they are (the cursor's
# row only while the cursor is shown, and the pane's height), the command (anyone's process name) escaped, last.
FACTS_FORMAT = SEP.join(["#{pane_id}", "#{pane_dead}", "#{pane_dead_status}", "#{pane_dead_signal}",
                         "#{window_activity}", "#{session_attached}", _LAST_LOOK,
                         "#{?cursor_flag,#{cursor_y},}", "#{pane_width}", "#{pane_height}", "#{pane_pid}",
                         _escaped("pane_title"), _escaped("pane_current_command")])
_FACTS = re.compile(rf"(%[0-9]+){SEP}([01]){SEP}([0-9]*){SEP}([0-9]*){SEP}([0-9]*){SEP}([0-9]*){SEP}([0-9]*){SEP}"
                    rf"([0-9]*){SEP}([0-9]*){SEP}([0-9]*){SEP}([0-9]*){SEP}{_TEXT}{SEP}{_TEXT}")
# The most cells (columns times rows) of one pane's visible screen that are captured: a pane resized larger
# (tmux takes windows up to 10000x10000) and filled would print more than one answer may hold, and every pane
# of its batch would be lost with it. A larger pane is not captured, tmux itself deciding (if-shell -F on its
# size), and only it is `unknown`. CAPTURE_BATCH panes of this many one-byte cells, with their newlines and
# headers, fit in the default $MAM_MAX_OUTPUT (16 MiB); a screen of 400x1000 or 1000x400 still is read. Wider
# characters can still make a batch too long: then each pane is captured alone (_capture_batch).
PANE_CELLS = 400_000
_FITS = f"#{{e|<=:#{{e|*:#{{pane_width}},#{{pane_height}}}},{PANE_CELLS}}}"
TOO_MUCH = "its screen printed more than one answer may hold ($MAM_MAX_OUTPUT), so it was not read"
# The header may start with the server's clock (strftime's %s, which display-message expands): activity times are
# the server's, so idleness is measured on its clock, not on this machine's (another host's may differ).
SERVER_CLOCK = "%s"
# Panes per capture call: each adds about 435 bytes of command (its header, and the capture inside an if-shell
# on its size), and tmux refuses a command of more than 16 KiB ("command too long"): 37 panes passed on tmux
# 3.3a, 36 with pane ids of six digits; 32 leave room for longer ids (checked on tmux 3.3a).
CAPTURE_BATCH = 32
_FACTS_LINE = re.compile(rf"(?:([0-9]+){SEP})?" + _FACTS.pattern + "\n")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)

# The first line of stderr when no server runs, as tmux words it, with the socket path where it names one;
# everything else is not "down". Each still needs no process listening at that path (orphaned_socket).
_DOWN = (
    re.compile(r"^no server running on (?P<path>.+)$"),  # connection refused: the file is not a listening socket
    re.compile(r"^error connecting to (?P<path>.*) \(No such file or directory\)$"),
    re.compile(r"^server exited unexpectedly$"),
    re.compile(r"^lost server$"),
)
_PERMISSION = re.compile(r"^error connecting to .* \(Permission denied\)$")


def base_argv(server: str, *, query: bool, env: Mapping[str, str]) -> list[str]:
    argv = [EXECUTABLE]
    if query:
        argv.append("-N")
    argv += ["-L", server]
    config = env.get("MAM_TMUX_CONFIG")
    if config:  # for tests and for users who want servers without their ~/.tmux.conf
        argv += ["-f", config]
    if query:  # text as it is: in a non-UTF-8 locale the client prints '_' for each non-ASCII character
        argv.append("-u")
    return argv


def _inside(server: str, tmux: str) -> bool:
    """$TMUX (`SOCKET,PID,SESSION`) names the socket of server `server` (`tmux -L`): .../tmux-UID/SERVER."""
    socket = tmux.rsplit(",", 2)[0] if tmux.count(",") >= 2 else ""
    return bool(socket) and os.path.basename(socket) == server \
        and os.path.basename(os.path.dirname(socket)) == f"tmux-{os.getuid()}"


def client_env(env: Mapping[str, str]) -> dict[str, str]:
    """tmux follows $TMUX to the enclosing server; never let it."""
    return {k: v for k, v in env.items() if k not in MARKERS}


def literal(arg: str) -> str:
    """An argument tmux takes as it is: it reads one ending in ';' as a command separator unless a backslash
    comes before that ';' (and then drops only that backslash)."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def literal_format(arg: str) -> str:
    """An argument tmux expands as a format (`new-session -c` and `-s`): `##` is a literal `#`, and no other
    character starts a format."""
    return literal(arg.replace("#", "##"))


def _unescape(text: str) -> str:
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


def parse_panes(stdout: str) -> tuple[Agent, ...]:
    """One agent per session: the pane mam started it in (the session's `@mam_pane`), while that pane lives; for
    a session without one (started by an older mam, or by hand and adopted), its first live pane. So a pane the
    user split off beside an agent whose own pane died is never taken for the agent. A dead pane (kept by
    remain-on-exit) runs nothing: a session of dead panes only is no agent. Every record must parse exactly, or
    the whole answer is refused: a record passed over would read as an agent gone."""
    firsts: dict[str, tuple[tuple[int, int], Agent]] = {}
    order: list[str] = []
    pos = 0
    while pos < len(stdout):
        match = _RECORD.match(stdout, pos)
        if match is None:
            raise ValueError(f"listing record at character {pos} does not parse")
        pos = match.end()
        sid, name, window, pane, pane_id, _pid, dead, kind, path, own = match.groups()
        name = _unescape(name)
        own = _unescape(own)
        if name == KEEPALIVE or dead == "1" or (_PANE_ID.fullmatch(own) and own != pane_id):
            continue
        position = (int(window), int(pane))
        # A session without @mam_pane is not mam's (the user's own, or adopted): never closed without --force.
        agent = Agent(name=name, agent=_unescape(kind) or None, cwd=_unescape(path) or None, pane_id=pane_id,
                      foreign=not _PANE_ID.fullmatch(own))
        if sid not in firsts:
            order.append(sid)
            firsts[sid] = (position, agent)
        elif position < firsts[sid][0]:
            firsts[sid] = (position, agent)
    return tuple(firsts[sid][1] for sid in order)


_TABLE_HEADER = "Num "
TABLE_TRIES = 3  # processes of one namespace to try: one may end between the listing and the read


def _listening_inodes(path: str, env: Mapping[str, str], timeout: float) -> set[str] | None:
    """The Unix sockets listening at `path`, in every network namespace mam can see. Linux keeps the path a
    socket was bound to in /proc/net/unix even after its file is deleted, but that table lists the sockets of
    the reader's namespace only (a sandbox without the network sees none of the host's): so one table is read
    per namespace. None when mam cannot look: no /proc, a table it cannot read or does not recognise. Read
    with `net_namespaces` and `read_text`: on the machine tmux runs on."""
    spaces = net_namespaces(timeout=timeout, env=env)
    inodes: set[str] = set()
    for attempt in range(2):
        if spaces is None:
            return None
        missed: set[str] = set()
        for space, pids in spaces.items():
            table = next((t for t in (read_text(f"/proc/{pid}/net/unix", timeout=timeout, env=env)
                                      for pid in pids[:TABLE_TRIES]) if t is not None), None)
            if table is None:
                missed.add(space)
                continue
            if not table.startswith(_TABLE_HEADER):
                return None
            for line in table.split("\n")[1:]:  # Num RefCount Protocol Flags Type St Inode Path (one line each)
                parts = line.split(None, 7)
                if len(parts) == 8 and parts[7] == path and parts[6].isdigit() and _is_listening(parts[3]):
                    inodes.add(parts[6])
        if not missed:
            return inodes
        if attempt:
            break
        # The processes tried may all have ended between the listing and the reads (a sandbox's short-lived
        # command): those namespaces are listed again, and one no process is in any more is left out.
        again = net_namespaces(timeout=timeout, env=env)
        spaces = None if again is None else {space: again[space] for space in missed if space in again}
    return None  # a namespace whose table could not be read twice: mam cannot tell


def _is_listening(flags: str) -> bool:
    try:
        return bool(int(flags, 16) & 0x10000)  # __SO_ACCEPTCON
    except ValueError:
        return False


def _socket_owners(inodes: set[str], env: Mapping[str, str], timeout: float) -> list[int]:
    """The processes of this user that hold one of the sockets `inodes` open (find reads their fd links)."""
    names: list[str] = []
    for inode in sorted(inodes):  # digits only: nothing in the pattern but the brackets needs escaping
        names += ["-o"] if names else []
        names += ["-lname", f"socket:\\[{inode}\\]"]
    result = run(["find", "/proc", "-mindepth", "3", "-maxdepth", "3", "-path", "/proc/[0-9]*/fd/*",
                  "(", *names, ")", "-print"], timeout=timeout, env=env)
    # Other users' processes make find exit 1: what it could read is still the answer.
    pids = {int(m[1]) for m in re.finditer(r"^/proc/([0-9]+)/fd/[0-9]+$", result.stdout, re.MULTILINE)}
    return sorted(pids)


def orphaned_socket(path: str, env: Mapping[str, str] | None = None, timeout: float = 10.0) -> str | None:
    """Why tmux's "no server" at `path` does not mean down: a process still listens on a socket bound there
    (a temp cleaner deleted the file, or something else now stands at the path), or mam cannot tell; None only
    when it looked, everywhere, and none does."""
    env = client_env(env if env is not None else {"PATH": os.defpath})
    inodes = _listening_inodes(path, env, timeout)
    if inodes is None:  # mam cannot see who listens there: its server may live, so never down
        return (f"tmux finds no server at {path}, but mam cannot tell whether a process still listens on a "
                "socket bound there (no readable /proc/net/unix for every network namespace)")
    if not inodes:
        return None
    pids = _socket_owners(inodes, env, timeout)
    if not pids:
        return f"the socket file {path} is missing or replaced, but a process still listens on it"
    return (f"the socket file {path} is missing or replaced, but tmux server process {pids[0]} still runs: "
            f"`kill -USR1 {pids[0]}` makes it create the file again")


def socket_path(server: str, env: Mapping[str, str]) -> str:
    """Where `tmux -L server` connects, as tmux makes it: $TMUX_TMPDIR (else /tmp), resolved, then tmux-UID."""
    base = os.path.realpath(env.get("TMUX_TMPDIR") or "/tmp")
    return os.path.join(base, f"tmux-{os.getuid()}", server)


def classify_stderr(stderr: str, socket: str | None = None, env: Mapping[str, str] | None = None,
                    timeout: float = 10.0) -> ServerError | None:
    """What tmux's stderr says of the server; `socket` is its path, for the messages that do not name it;
    `env` and `timeout` for the check of the socket's listeners (the environment its client ran with)."""
    first = first_line(stderr)
    down = next((m for m in (p.match(first) for p in _DOWN) if m is not None), None)
    if down is not None:
        path = down.groupdict().get("path") or socket
        orphaned = orphaned_socket(path, env, timeout) if path else None
        if orphaned is not None:  # its server lives: never down, so nothing starts a second one on the path
            return ServerError(ErrorKind.UNKNOWN, orphaned)
        return ServerError(ErrorKind.SERVER_DOWN, first)
    if _PERMISSION.match(first):
        return ServerError(ErrorKind.PERMISSION, first)
    return None


def _missing_target(stderr: str) -> bool:
    """tmux's answer for a session (or pane) that is not there, on a server that is."""
    return first_line(stderr).startswith(("can't find session", "can't find window", "can't find pane"))


def _last_words(screen: str) -> str:
    """The last line a dead pane's program printed, printable and short: pane text is anyone's."""
    lines = [line for line in screen.splitlines() if line.strip() and not line.startswith("Pane is dead")]
    text = "".join(c for c in lines[-1] if c.isprintable()).strip() if lines else ""
    return text if len(text) <= 160 else text[:157] + "..."


def _header(nonce: str) -> str:
    """The line printed before each pane's capture. `nonce` is fresh random text per call: a pane cannot draw
    it in advance, so no screen can forge a header and shift one pane's text onto another."""
    return f"{nonce}{SEP}{SERVER_CLOCK}{SEP}{FACTS_FORMAT}"


def capture_args(pane_ids: list[str], nonce: str) -> list[str]:
    """The command sequence that captures `pane_ids` (each a checked %N): per pane, its header, then its visible
    screen when it fits (_FITS: tmux decides on the pane's size, so a larger one prints nothing)."""
    args: list[str] = []
    for pane_id in pane_ids:
        # The header is a format tmux expands: the nonce is hex, so it holds no '#'. The pane id is a checked %N,
        # safe in the command string if-shell parses.
        args += [";"] if args else []
        args += ["display-message", "-p", "-t", pane_id, _header(nonce), ";",
                 "if-shell", "-F", "-t", pane_id, _FITS, f"capture-pane -p -J -t {pane_id}"]
    return args


def parse_captures(stdout: str, nonce: str, pane_ids: list[str], now: float) -> dict[str, PaneCapture]:
    """Split one `display -p HEADER ; capture-pane -p` sequence back into panes. The headers must come in the
    order asked, one per pane, or the whole answer is refused (ValueError). `now` is this machine's clock, for
    a header without the server's."""
    chunks = stdout.split(nonce + SEP)
    if chunks[0] or len(chunks) != len(pane_ids) + 1:
        raise ValueError(f"expected {len(pane_ids)} pane captures, got {len(chunks) - 1}")
    out: dict[str, PaneCapture] = {}
    for pane_id, chunk in zip(pane_ids, chunks[1:], strict=True):
        match = _FACTS_LINE.match(chunk)  # the command may hold escaped newlines: match the header, not a line
        if match is None or match.group(2) != pane_id:
            raise ValueError(f"the capture header of pane {pane_id} does not parse")
        text = chunk[match.end():]
        (clock, _, dead, status, signal, activity, attached, last_attached, cursor, width, height, pid, title,
         command) = match.groups()
        server_now = int(clock) if clock else now
        ended = f"exit status {status}" if status else f"signal {signal}" if signal else None
        changed = int(activity) if activity else None
        seen: bool | None = None
        if changed is not None:
            # Someone looks at it now, or looked after its last output (_LAST_LOOK: its last attach, else the end
            # of its start-up): seen.
            seen = attached not in ("", "0") or (int(last_attached or 0) >= changed)
        idle = max(0.0, server_now - changed) if changed is not None else None
        # capture-pane prints every row of the pane: the rows under the cursor's are counted from the bottom.
        below = int(height) - 1 - int(cursor) if cursor and height and int(cursor) < int(height) else None
        unread = _too_large(width, height)
        out[pane_id] = PaneCapture(text=None if unread else text, dead=dead == "1", dead_status=ended,
                                   command=_unescape(command) or None, idle_seconds=idle, seen=seen,
                                   below_cursor=below, pid=int(pid) if pid else None,
                                   title=_unescape(title) if title else None, unread=unread)
    return out


def _too_large(width: str, height: str) -> str | None:
    """Why a pane of `width` x `height` cells was not captured (None: it was), as tmux decided by _FITS."""
    cells = int(width or 0) * int(height or 0)
    if cells <= PANE_CELLS:
        return None
    return (f"its pane is {width}x{height}, {cells} cells: more than the {PANE_CELLS} mam reads of one screen, "
            "so it was not captured")


class TmuxBackend:
    name = "tmux"
    pastes_lines = True  # send_text takes a text of several lines and sends it as one paste

    def __init__(self) -> None:
        # Each server's socket path, from the environment its client last ran with: classify has no environment.
        self._sockets: dict[str, str] = {}
        # ...and that environment and time limit, for classify's own calls (the socket's listeners).
        self._clients: dict[str, tuple[Mapping[str, str], float]] = {}

    def _run(self, server: str, args: list[str], *, timeout: float, env: Mapping[str, str], query: bool = True,
             cwd: str | None = None, stdin: bytes | None = None) -> CommandResult:
        argv = base_argv(server, query=query, env=env) + args
        self._sockets[server] = socket_path(server, env)
        self._clients[server] = (env, timeout)
        if stdin is None:
            return run(argv, timeout=timeout, env=client_env(env), cwd=cwd)
        return run(argv, timeout=timeout, env=client_env(env), cwd=cwd, stdin=stdin)

    def _classify_stderr(self, server: str, stderr: str) -> ServerError | None:
        env, timeout = self._clients.get(server, (None, 10.0))
        return classify_stderr(stderr, self._sockets.get(server), env, timeout)

    def _is_down(self, server: str, stderr: str) -> bool:
        error = self._classify_stderr(server, stderr)
        return error is not None and error.kind is ErrorKind.SERVER_DOWN

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        result = self._run(server, ["list-panes", "-a", "-F", LIST_FORMAT], timeout=ctx.timeout, env=ctx.env)
        return parse_or_failure(self.name, server, result, parse_panes)

    def classify(self, failure: Failure) -> ServerError | None:
        if failure.result.returncode in (None, 0):
            return None
        return self._classify_stderr(failure.server, failure.result.stderr)

    def version(self, ctx: CallContext) -> str | None:
        result = run([EXECUTABLE, "-V"], timeout=ctx.timeout, env=client_env(ctx.env))
        return result.stdout.strip() or None if result.returncode == 0 else None

    def _probe(self, server: str, ctx: BootstrapContext) -> bool | Failure:
        """True when up, False when tmux said it is down, a Failure when it could not tell."""
        result = self._run(server, ["list-sessions", "-F", "#{session_id}"], timeout=ctx.timeout, env=ctx.env)
        if result.returncode == 0:
            return True
        if result.returncode is not None and self._is_down(server, result.stderr):
            return False
        return Failure(self.name, server, result)

    def bootstrap(self, server: str, ctx: BootstrapContext) -> BootstrapResult:
        state = self._probe(server, ctx)
        if isinstance(state, Failure):
            return BootstrapResult(False, False, "could not tell whether the server runs", failure=state)
        if state:
            return BootstrapResult(False, True, f"tmux server {server} is already running")
        # The log first: a log mam refuses (a planted link) must fail the bootstrap before a server runs.
        ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open_text_log(ctx.log_path) as log:
            # The server copies the environment of the client that starts it: ctx.env is already scrubbed.
            result = self._run(server, ["new-session", "-d", "-s", KEEPALIVE, "-x", "80", "-y", "24"],
                               timeout=ctx.timeout, env=ctx.env, query=False, cwd=str(ctx.cwd))
            log.write(result.stdout + result.stderr)
        if result.returncode == 1 and first_line(result.stderr) == f"duplicate session: {KEEPALIVE}":
            # Another client started this server since our probe: it is up, and this bootstrap did not start it.
            if self._probe(server, ctx) is True:
                return BootstrapResult(False, True, f"tmux server {server} was started meanwhile by another client")
        # `new-session -d` can exit 0 while failing: any stderr is a failure.
        if result.returncode != 0 or result.stderr.strip():
            return BootstrapResult(True, False, "tmux new-session failed", failure=Failure(self.name, server, result))
        confirm = self._run(server, ["has-session", "-t", "=" + KEEPALIVE], timeout=ctx.timeout, env=ctx.env)
        if confirm.returncode != 0:
            return BootstrapResult(True, False, "the new tmux server does not answer",
                                   failure=Failure(self.name, server, confirm))
        return BootstrapResult(True, True, f"started tmux server {server}")

    def client_argv(self, server: str, args: list[str]) -> list[str]:
        return [EXECUTABLE, "-L", server, *args]

    def attach_argv(self, server: str, agent: Agent, outer: Mapping[str, str], tty: str | None) -> list[str]:
        """The agent's window and pane selected, then the client attached to its session; a caller already in a
        client of this server (its $TMUX names this server's socket), on a terminal, has that client switched
        instead: tmux finds it from the terminal of the pane the command runs in (no $TMUX needed)."""
        pane = agent.pane_id if agent.pane_id and _PANE_ID.fullmatch(agent.pane_id) else None
        target = pane or literal(f"={agent.name}")
        select = ["select-window", "-t", pane, ";", "select-pane", "-t", pane, ";"] if pane else []
        if tty is not None and _inside(server, outer.get("TMUX", "")):
            return [*self.client_argv(server, select), "switch-client", "-t", target]
        return [*self.client_argv(server, select), "attach-session", "-t", target]

    def spawn(self, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        # Names tmux cannot keep ('.') are refused by the core, from the plugin's name rule, before this runs.
        if not request.argv:
            return SpawnResult(False, "no program to run")
        if "=" in request.argv[0]:
            return SpawnResult(False, f"tmux cannot run the program {request.argv[0]!r}: env, which starts it, "
                               "would read a name holding '=' as a variable")
        if not os.path.isabs(request.cwd):  # tmux would read "~" at its start as the home directory
            return SpawnResult(False, f"tmux needs an absolute directory, not {request.cwd!r}")
        # A pane gets the server's global environment, copied when the server started. A server mam did not
        # start may hold markers: unset, for this agent, whatever the server has that ctx.env does not.
        leftovers = self._server_only_variables(server, ctx)
        if isinstance(leftovers, Failure):
            return SpawnResult(False, "could not read the server's environment", failure=leftovers)
        given = {name for name, _ in request.env}
        # tmux runs a command of one argument with `sh -c` and longer ones with execvp: starting with env makes
        # it at least two, so the argv runs exactly as given, never as shell text.
        argv = ["env", *(part for name in leftovers if name not in given for part in ("-u", name)), "--",
                *request.argv]
        # The agent's own variables go in the session's environment (-e: not a format), never in the command
        # line, which tmux keeps as the pane's start command for anyone who lists the server.
        variables = [part for name, value in request.env for part in ("-e", literal(f"{name}={value}"))]
        args = ["new-session", "-d", "-s", literal_format(request.name), "-c", literal_format(request.cwd),
                *variables, "-P", "-F", "#{pane_id}", "--", *(literal(arg) for arg in argv)]
        # In the same invocation, so both are in place before anyone lists the session and before tmux can see
        # the program end (it learns of that in its event loop, after this invocation's commands have run);
        # without -t they apply to the session just made. remain-on-exit keeps a pane whose program ends, so
        # that _watch can read why. Option values are not formats.
        args += [";", "set-option", "-w", "remain-on-exit", "on"]
        # The agent's own pane, by id (-F: the value is this format, expanded once, for the new session's pane).
        args += [";", "set-option", "-F", "@mam_pane", "#{pane_id}"]
        if request.agent:
            args += [";", "set-option", "@mam_agent", literal(request.agent)]
        result = self._run(server, args, timeout=ctx.timeout, env=ctx.env, query=False, cwd=request.cwd)
        if first_line(result.stderr).startswith("duplicate session:") and self._clear_remains(server, request.name,
                                                                                              ctx):
            # -N: had that session been the server's last, the server is gone, and this must not start one.
            result = self._run(server, args, timeout=ctx.timeout, env=ctx.env, query=True, cwd=request.cwd)
        if result.returncode != 0 or result.stderr.strip():
            return SpawnResult(False, "tmux refused the new session", failure=Failure(self.name, server, result))
        pane_id = result.stdout.strip()
        if not _PANE_ID.fullmatch(pane_id):
            return SpawnResult(True, f"started {request.name} on tmux server {server}")
        ended = self._watch(server, pane_id, ctx)
        if ended is None:
            return SpawnResult(True, f"started {request.name} on tmux server {server}", pane_id=pane_id)
        screen = self._run(server, ["capture-pane", "-p", "-J", "-t", pane_id], timeout=ctx.timeout, env=ctx.env)
        words = _last_words(screen.stdout) if screen.returncode == 0 else ""
        # The dead pane would hold the name: close its session (by pane id: only the one made here).
        self._run(server, ["kill-session", "-t", pane_id], timeout=ctx.timeout, env=ctx.env)
        program = os.path.basename(request.argv[0])
        return SpawnResult(False, f"{program!r} {ended}" + (f": {words}" if words else ""))

    def _clear_remains(self, server: str, name: str, ctx: CallContext) -> bool:
        """Close session `name` when mam made it (it has @mam_pane) and every pane of it is dead: what an ended
        agent leaves where remain-on-exit is on (the listing has no agent there), which would hold its name
        forever. A session mam did not make, or where anything runs, is left alone. True when it was asked to
        close; the retried spawn tells whether the name is free."""
        shown = self._run(server, ["list-panes", "-s", "-t", literal("=" + name), "-F", _REMAINS_FORMAT],
                          timeout=ctx.timeout, env=ctx.env)
        session_id, _, ours = shown.stdout.partition("\n")[0].partition(SEP)
        if shown.returncode != 0 or not _SESSION_ID.fullmatch(session_id) or ours != "mam":
            return False
        # The test and the close in one step on the server: a pane respawned since is never killed.
        closed = self._run(server, ["if-shell", "-F", "-t", session_id, _ALL_DEAD, f"kill-session -t '{session_id}'"],
                           timeout=ctx.timeout, env=ctx.env)
        return closed.returncode == 0

    def _ended(self, server: str, pane_id: str, ctx: CallContext) -> str | None | Failure:
        """How the program of `pane_id` ended, None while it runs, a Failure when tmux could not tell, and ""
        when it is dead without a status yet (tmux saw its terminal close before it reaped the process)."""
        result = self._run(server, ["list-panes", "-t", pane_id, "-F", PANE_STATE], timeout=ctx.timeout,
                           env=ctx.env)
        if result.returncode != 0:
            return "exited at once" if _missing_target(result.stderr) else Failure(self.name, server, result)
        for line in result.stdout.splitlines():
            fields = line.split(SEP)
            if len(fields) != 4 or fields[0] != pane_id:
                continue
            _, dead, status, signal = fields
            if dead != "1":
                return None
            if status.isdigit():
                return f"exited at once with status {status}"
            return f"was killed at once by signal {signal}" if signal.isdigit() else ""
        return "exited at once"  # its window is there, the pane is not

    def _watch(self, server: str, pane_id: str, ctx: CallContext) -> str | None:
        """Why the new agent ended within EXIT_WINDOW, or None when it still runs (or tmux could not tell: the
        core's listing decides then). Its window keeps `remain-on-exit on` afterwards, whatever the server's
        value: every ended agent's pane stays, dead, with its exit status or signal, its time and its last lines,
        so that mam can tell one that finished (status 0) from one that failed, was killed or was lost; the next
        spawn or restore of the name, or `mam stop`, closes it."""
        ended = poll_until(lambda: self._ended(server, pane_id, ctx), wait=EXIT_WINDOW, interval=POLL_INTERVAL)
        if ended == "":  # dead: its status comes once tmux has reaped it
            ended = poll_until(lambda: self._ended(server, pane_id, ctx) or None, wait=1.0,
                               interval=POLL_INTERVAL / 5) or "exited at once"
        return ended if isinstance(ended, str) else None

    def agent_remains(self, server: str, names: tuple[str, ...],
                      ctx: CallContext) -> dict[str, Remains] | Failure:
        """The ended agents of `names` whose pane remain-on-exit keeps (spawn sets it `on` for the agent's
        window): each one's exit status or signal, when it ended, and the last lines of its pane. Reads only;
        the pane is closed by the next spawn or restore of the name, or stop."""
        wanted = set(names)
        listed = self._run(server, ["list-panes", "-a", "-F", REMAINS_FORMAT], timeout=ctx.timeout, env=ctx.env)
        if listed.returncode != 0:
            if _missing_target(listed.stderr) or self._is_down(server, listed.stderr):
                return {}
            return Failure(self.name, server, listed)
        panes: dict[str, list[tuple[str, bool, str, str, str, str]]] = {}
        pos = 0
        while (match := _REMAINS_RECORD.match(listed.stdout, pos)) is not None:  # a record that does not parse
            pos = match.end()  # ends the reading: what came before it stands
            name, pane_id, dead, status, signal, when, own = match.groups()
            name = _unescape(name)
            if name in wanted:
                panes.setdefault(name, []).append((pane_id, dead == "1", status, signal, _unescape(own), when))
        remains: dict[str, Remains] = {}
        for name, of_session in panes.items():
            own = of_session[0][4]
            pane = next((p for p in of_session if p[0] == own), of_session[0])
            pane_id, dead, status, signal, _, when = pane
            if not dead:
                continue
            if not status and not signal:  # dead before tmux reaped it: its status (and time) come a moment later
                status, signal, reaped_at = self._dead_facts(server, pane_id, ctx)
                when = when or reaped_at
            screen = self._run(server, ["capture-pane", "-p", "-J", "-S", REMAINS_HISTORY, "-t", pane_id],
                               timeout=ctx.timeout, env=ctx.env)
            shown = [line for line in screen.stdout.splitlines() if line.strip()] if screen.returncode == 0 else []
            # tmux's own last line, written once the program is gone (none can print after it), has the status
            # when the listing had none yet.
            told = _DEAD_LINE.match(shown[-1]) if shown and not (status or signal) else None
            if told is not None:
                status, signal = told["status"] or "", told["signal"] or ""
            lines = [line for line in shown if not line.startswith("Pane is dead")]
            remains[name] = Remains(int(status) if status.isdigit() else None,
                                    int(signal) if signal.isdigit() else None, tuple(lines[-REMAINS_LINES:]),
                                    float(when) if when.isdigit() else None)
        return remains

    def _dead_status(self, server: str, pane_id: str, ctx: CallContext) -> tuple[str, str]:
        """The exit status and signal of the dead pane `pane_id` (_dead_facts)."""
        status, signal, _ = self._dead_facts(server, pane_id, ctx)
        return status, signal

    def _dead_facts(self, server: str, pane_id: str, ctx: CallContext) -> tuple[str, str, str]:
        """The exit status, signal and time of death of the dead pane `pane_id`, once tmux has reaped its program
        (at most a second); empty when it has not by then (the time too: tmux sets it as it reaps). tmux 3.3a may
        leave the program a zombie, the pane dead without a status, until a child of its own ends: `run-shell
        true` makes one, and the server reaps them all before the display-message after it runs (measured: 12 of
        20 reads missed the status without it, none with)."""
        def reaped() -> tuple[str, str, str] | None:
            shown = self._run(server, ["run-shell", "true", ";", "display-message", "-p", "-t", pane_id,
                                       f"#{{pane_dead_status}}{SEP}#{{pane_dead_signal}}{SEP}#{{pane_dead_time}}"],
                              timeout=ctx.timeout, env=ctx.env)
            if shown.returncode != 0:
                return ("", "", "")  # the pane is gone: nothing more to learn
            # rstrip("\n") only: str.strip() takes the separator (\x1f) for white space, and a signal's record
            # ("" SEP "9") became the status 9: a killed agent read as one that failed.
            status, signal, when = (shown.stdout.rstrip("\n").split(SEP) + ["", "", ""])[:3]
            return (status, signal, when if when.isdigit() else "") if status or signal else None

        return poll_until(reaped, wait=1.0, interval=POLL_INTERVAL) or ("", "", "")

    def _server_only_variables(self, server: str, ctx: CallContext) -> list[str] | Failure:
        """The names in the server's global environment that a client started now would not have. Those are
        asked of `env` where the server runs, never read from ctx.env: a server on another host gets that
        host's login environment, and what holds there and not here is the agent's to keep."""
        result = self._run(server, ["show-environment", "-g"], timeout=ctx.timeout, env=ctx.env)
        if result.returncode != 0:
            return Failure(self.name, server, result)
        client = run(["env", "-0"], timeout=ctx.timeout, env=ctx.env)
        if client.returncode != 0:
            return Failure(self.name, server, client)
        has = {entry.split("=", 1)[0] for entry in client.stdout.split("\0") if entry}
        if any("\n" in name for name in has):  # a login script's output before env's: the names are not sure
            return Failure(self.name, server, client)
        names = []
        # A value holding a newline can add a line here, never hide one: at worst a name is unset needlessly.
        for line in result.stdout.splitlines():
            name = line.split("=", 1)[0]
            if "=" in line and name not in has and name not in MARKERS and name.isidentifier():
                names.append(name)
        return sorted(names)

    def stop(self, server: str, name: str, ctx: CallContext, force: bool = False) -> StopResult:
        """Close session `name` when mam made it (its `@mam_pane` is set); one without it is the user's, and
        left running unless `force` (the user named it with `mam stop NAME --force`)."""
        target = literal("=" + name)
        if force:  # one invocation: whether any of its panes still runs, then close it (dead panes only too)
            result = self._run(server, ["list-panes", "-s", "-t", target, "-F", "#{pane_dead}", ";",
                                        "kill-session", "-t", target], timeout=ctx.timeout, env=ctx.env)
            return self._stopped(server, name, result, "0" in result.stdout.split())
        shown = self._run(server, ["list-panes", "-s", "-t", target, "-F", _STOP_FORMAT], timeout=ctx.timeout,
                          env=ctx.env)
        if shown.returncode != 0:
            return self._stopped(server, name, shown, False)
        panes = [line.split(SEP) for line in shown.stdout.splitlines()]
        session_id = panes[0][0] if panes and len(panes[0]) == 3 else ""
        if not _SESSION_ID.fullmatch(session_id):
            return StopResult(False, "tmux could not list the session", failure=Failure(
                self.name, server, shown, parse_error="no session id in the listing"))
        if panes[0][1] != "mam":
            return StopResult(False, f"tmux session {name} on server {server} was not started by mam (it has no "
                                     "@mam_pane): left running", foreign=True)
        # The test and the close in one step on the server: a session whose mark went meanwhile is never closed.
        result = self._run(server, ["if-shell", "-F", "-t", session_id, "#{@mam_pane}",
                                    f"kill-session -t '{session_id}'", f"display-message -p {FOREIGN}"],
                           timeout=ctx.timeout, env=ctx.env)
        if result.returncode == 0 and result.stdout.strip() == FOREIGN:
            return StopResult(False, f"tmux session {name} on server {server} lost its @mam_pane: left running",
                              foreign=True)
        return self._stopped(server, name, result, any(p[2:] == ["0"] for p in panes))

    def _stopped(self, server: str, name: str, result: CommandResult, ran: bool) -> StopResult:
        """What a close of session `name` came to; `ran`: a pane of it was alive when it was asked."""
        if result.returncode == 0 and ran:
            return StopResult(True, f"closed tmux session {name}")
        if result.returncode == 0:
            return StopResult(False, f"{name} had exited on tmux server {server}; its dead pane is closed")
        if _missing_target(result.stderr) or self._is_down(server, result.stderr):
            return StopResult(False, f"{name} was not running on tmux server {server}")
        return StopResult(False, "tmux could not close the session", failure=Failure(self.name, server, result))

    def capture_panes(self, server: str, agents: tuple[Agent, ...],
                      ctx: CallContext) -> dict[str, PaneCapture] | Failure:
        """Every pane in one tmux call (up to CAPTURE_BATCH panes a call: tmux refuses a longer command as "command
        too long"): a header line of facts, then the visible screen, for each; a screen of more than PANE_CELLS
        cells is not captured. A pane gone since the listing fails the whole sequence (tmux stops at the first
        error), and an answer longer than one may be ($MAM_MAX_OUTPUT) is not read: then one call per pane, so
        that a pane that is gone is left out (`unknown`), and one that prints too much is `unknown` alone."""
        panes = {a.pane_id: a.name for a in agents if a.pane_id and _PANE_ID.fullmatch(a.pane_id) and a.name}
        ids = list(panes)
        captured: dict[str, PaneCapture] = {}
        for start in range(0, len(ids), CAPTURE_BATCH):
            batch = self._capture_batch(server, ids[start:start + CAPTURE_BATCH], ctx)
            if isinstance(batch, Failure):
                return batch
            captured.update(batch)
        return {panes[pane_id]: capture for pane_id, capture in captured.items()}

    def _capture_batch(self, server: str, pane_ids: list[str],
                       ctx: CallContext) -> dict[str, PaneCapture] | Failure:
        captured = self._capture(server, pane_ids, ctx)
        if not isinstance(captured, Failure):
            return captured
        over, gone = captured.result.over_limit, _missing_target(captured.result.stderr)
        if len(pane_ids) == 1:
            if over:  # this pane alone prints more than one answer may hold: only it is left unread
                return {pane_ids[0]: PaneCapture(text=None, unread=TOO_MUCH)}
            return {} if gone else captured
        if not (over or gone):
            return captured
        out: dict[str, PaneCapture] = {}
        for pane_id in pane_ids:
            one = self._capture_batch(server, [pane_id], ctx)
            if isinstance(one, Failure):
                return one
            out.update(one)
        return out

    def _capture(self, server: str, pane_ids: list[str], ctx: CallContext) -> dict[str, PaneCapture] | Failure:
        nonce = "mam-" + secrets.token_hex(16)
        result = self._run(server, capture_args(pane_ids, nonce), timeout=ctx.timeout, env=ctx.env)
        now = time.time()
        return parse_or_failure(self.name, server, result, lambda out: parse_captures(out, nonce, pane_ids, now))

    def send_text(self, server: str, agent: Agent, text: str, enter: bool, ctx: CallContext) -> SendResult:
        """`text` as literal characters (`send-keys -l`: no key names), then Enter as a key of its own. A text of
        several lines (or too long for one tmux command) is one paste: loaded into a buffer of its own from stdin
        (no argument or message size limits it), pasted with `-p` (bracketed when the program asked for bracketed
        paste, so that its lines do not each submit) and `-d` (the buffer goes with it), in the same tmux call."""
        if not agent.pane_id or not _PANE_ID.fullmatch(agent.pane_id):
            return SendResult(False, f"tmux gave no pane id for {agent.name}")
        args: list[str] = []
        stdin: bytes | None = None
        buffer = "mam-send-" + secrets.token_hex(8)
        if "\n" in text or len(literal(text).encode()) > SEND_KEYS_MAX:
            args += ["load-buffer", "-b", buffer, "-", ";", "paste-buffer", "-p", "-d", "-b", buffer,
                     "-t", agent.pane_id]
            stdin = text.encode()
        elif text:
            args += ["send-keys", "-l", "-t", agent.pane_id, "--", literal(text)]
        if enter:
            args += [";"] if args else []
            args += ["send-keys", "-t", agent.pane_id, "Enter"]
        result = self._run(server, args, timeout=ctx.timeout, env=ctx.env, stdin=stdin)
        if result.returncode != 0 or result.stderr.strip():
            if stdin is not None:  # a paste that failed (its pane went) leaves no buffer of the text behind
                self._run(server, ["delete-buffer", "-b", buffer], timeout=ctx.timeout, env=ctx.env)
            verb = "paste-buffer" if stdin is not None else "send-keys"
            return SendResult(False, f"tmux {verb} failed", failure=Failure(self.name, server, result))
        how = "pasted" if stdin is not None else "sent"
        return SendResult(True, sent_message(how, text, agent.name, enter))
