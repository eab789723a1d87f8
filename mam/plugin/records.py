"""Small typed records shared by the core and the backends. No behaviour beyond JSON shaping."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol


class ServerState(StrEnum):
    UP = "up"  # the server answered a listing
    DOWN = "down"  # the backend said, by its own unambiguous signal, that no server runs
    UNKNOWN = "unknown"  # anything else; never read as "no agents"


class ErrorKind(StrEnum):
    SERVER_DOWN = "server_down"
    TIMEOUT = "timeout"
    NOT_INSTALLED = "not_installed"
    PERMISSION = "permission"
    BAD_OUTPUT = "bad_output"
    PROTOCOL_MISMATCH = "protocol_mismatch"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Agent:
    """One agent a live server listed. `name` is None for agents the backend knows by pane only."""

    name: str | None
    agent: str | None = None  # its kind: claude, codex, ...
    state: str | None = None  # the backend's own agent state, when it has one
    cwd: str | None = None
    pane_id: str | None = None
    # The agent's own resumable session id, when the backend reports one (herdr's `agent_session` of kind id):
    # `mam reconcile --apply` records it in the row, so that restore can resume that conversation.
    session: str | None = None
    # The multiplexer shows that mam did not make this pane or session (tmux: no `@mam_pane`): `find_for_stop`
    # never closes it unless the user forces it. False when it carries mam's mark, or the backend cannot tell.
    foreign: bool = False

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "agent": self.agent, "state": self.state, "cwd": self.cwd,
                "pane_id": self.pane_id}


@dataclass(frozen=True)
class CommandResult:
    """The raw outcome of one backend process."""

    argv: tuple[str, ...]
    returncode: int | None  # None when it never ran or was killed
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    not_found: bool = False  # the executable is not on PATH
    timeout: float = 0.0
    os_error: str | None = None  # it could not be started for another reason
    # It printed more than one answer may ($MAM_MAX_OUTPUT): killed, its output not read (os_error says so).
    over_limit: bool = False
    # Set when the call ran on another host and the transport itself failed (ssh could not connect or log in):
    # what that means, settled before any backend reads the result (never server_down).
    transport_error: ServerError | None = None


@dataclass(frozen=True)
class Failure:
    """A backend call that gave no usable answer. The classify hook decides what it means."""

    backend: str
    server: str
    result: CommandResult
    parse_error: str | None = None  # the call succeeded but its output did not parse


@dataclass(frozen=True)
class ServerError:
    kind: ErrorKind
    message: str

    def as_json(self) -> dict[str, object]:
        return {"kind": self.kind.value, "message": self.message}


@dataclass(frozen=True)
class ServerOutcome:
    """What one server said when asked for its agents."""

    backend: str
    server: str
    state: ServerState
    agents: tuple[Agent, ...] = ()  # empty unless up
    error: ServerError | None = None
    host: str | None = None  # the SSH destination it was asked through; None: this machine

    def as_json(self) -> dict[str, object]:
        count: int | None
        count = len(self.agents) if self.state is ServerState.UP else 0 if self.state is ServerState.DOWN else None
        return {"backend": self.backend, "server": self.server, "host": self.host, "state": self.state.value,
                "agents": count, "error": self.error.as_json() if self.error else None}


@dataclass(frozen=True)
class CallContext:
    """What every backend call gets: its time limit and the environment to run the backend's CLI in."""

    timeout: float
    env: Mapping[str, str]


@dataclass(frozen=True)
class BootstrapContext:
    """What a bootstrap gets from the core. `env` is already scrubbed; the backend must not widen it."""

    timeout: float  # for each probe call
    wait: float  # how long to wait, in all, for the server to report it runs
    env: Mapping[str, str]
    log_path: Path  # append the server's stdout and stderr here
    cwd: Path


@dataclass(frozen=True)
class BootstrapResult:
    started: bool  # True when this bootstrap started the server, False when it was already up
    up: bool  # the server reports it runs
    message: str
    pid: int | None = None
    failure: Failure | None = None  # when not up: the call that failed, for the classify hook


@dataclass(frozen=True)
class SpawnRequest:
    """Start one agent: `argv` is run as given (no shell) in a new pane or session named `name`. `env` holds
    the (NAME, VALUE) pairs the agent is to get, for a backend that declares `spawn_env` (it sets them itself,
    out of the pane's command line); for any other, the core puts them in `argv` as `env -- NAME=VALUE ...`."""

    name: str
    agent: str | None
    cwd: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SpawnResult:
    ok: bool
    message: str
    pane_id: str | None = None
    failure: Failure | None = None
    # Not ok, but the multiplexer said the start may still finish (herdr's `timeout`): the row stays `starting`
    # for reconcile to settle from the listing, never recorded as failed.
    unsettled: bool = False


@dataclass(frozen=True)
class StopResult:
    stopped: bool  # True: it was running and is closed now; False: it was already gone
    message: str
    failure: Failure | None = None  # the backend could not tell or could not close it
    # A pane or session of that name is there, but mam did not make it (no mark of mam's): nothing was closed.
    foreign: bool = False


AGENT_STATES = ("working", "blocked", "idle", "done", "unknown")  # herdr's words, on every backend


@dataclass(frozen=True)
class PaneCapture:
    """What a backend without agent states of its own can tell of one agent's pane, for the core to classify.

    Every field but `text` is optional: None says the backend cannot tell, and the core never guesses it."""

    text: str | None  # the visible screen, as captured (hostile: it is matched, never run or printed whole)
    dead: bool = False  # the pane's program has ended (tmux remain-on-exit)
    dead_status: str | None = None  # how it ended: "exit status 1", "signal 9"
    command: str | None = None  # the program the pane runs now (tmux pane_current_command)
    idle_seconds: float | None = None  # seconds since the pane last changed: a working screen must be recent
    seen: bool | None = None  # someone has looked at it since it last changed (tmux: attached after it)
    below_cursor: int | None = None  # rows of `text` under the cursor's row, when the cursor is shown (tmux)
    pid: int | None = None  # the pane's process (tmux pane_pid): a hook's report holds while it is the same
    title: str | None = None  # the pane's title as the agent set it (tmux pane_title; hostile: matched, never run)
    # Why `text` is None, when the backend chose not to read the screen (tmux: a pane too large to read whole);
    # the agent is `unknown` with it. Hostile text may be quoted in it: the core cleans it before it shows it.
    unread: str | None = None


@dataclass(frozen=True)
class Remains:
    """What a multiplexer kept of an agent whose program ended (tmux `remain-on-exit`): how it ended and the last
    lines its pane showed, read before the pane is closed. None: the backend cannot tell."""

    exit_status: int | None = None  # the program's exit status
    exit_signal: int | None = None  # the signal that killed it
    lines: tuple[str, ...] = ()  # the last non-blank lines its pane showed, oldest first (hostile text)
    ended_at: float | None = None  # when it ended, in seconds since the epoch (tmux pane_dead_time)


@dataclass(frozen=True)
class AgentState:
    """An agent's state with the reason: `source` is hook (the agent's own report), backend (its own field),
    title (the title the agent set on its pane), screen (read by mam's rules from a capture) or none (the
    backend gave nothing to read)."""

    state: str  # one of AGENT_STATES
    source: str  # hook, backend, title, screen or none (docs/states.md, "Sources")
    evidence: Mapping[str, object] | None = None
    age: float | None = None  # seconds since its source last said so (None: the source cannot tell)

    def as_json(self) -> dict[str, object]:
        return {"state": self.state, "state_source": self.source,
                "evidence": dict(self.evidence) if self.evidence is not None else None,
                "state_age": round(self.age, 1) if self.age is not None else None}


@dataclass(frozen=True)
class SendResult:
    ok: bool
    message: str
    failure: Failure | None = None


class Backend(Protocol):
    """The object a backend plugin hands the core. It runs its CLI; it never scrubs or writes the registry."""

    name: str

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure: ...

    def bootstrap(self, server: str, ctx: BootstrapContext) -> BootstrapResult: ...

    def classify(self, failure: Failure) -> ServerError | None: ...

    def version(self, ctx: CallContext) -> str | None: ...


class SpawningBackend(Backend, Protocol):
    """A backend that can also start and stop agents (`mam spawn`, `mam stop`)."""

    def spawn(self, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult: ...

    # Since hook API 4 it may take `force: bool = False` as a keyword too (the core passes it only when true): a
    # stop closes only what mam made, answering `StopResult(False, ..., foreign=True)` for a pane or session of
    # that name without mam's mark, unless `force` (the user named it with `mam stop NAME --force`).
    def stop(self, server: str, name: str, ctx: CallContext) -> StopResult: ...

    def client_argv(self, server: str, args: list[str]) -> list[str]: ...


# Optional methods the core's default hooks look for (docs/backends.md, "Agent state"); a backend without them
# reports state `unknown` with source `none`, and `mam send` refuses it:
#   capture_panes(server, agents: tuple[Agent, ...], ctx) -> Mapping[str, PaneCapture] | Failure
#       one call per server for all of its live agents, keyed by agent name;
#   agent_state(server, agent: Agent, ctx) -> AgentState | None   (native state not in the listing)
#   send_text(server, agent: Agent, text: str, enter: bool, ctx) -> SendResult
#       with the attribute `pastes_lines = True`, it is also given texts of several lines, which it must send
#       as one paste (never as lines that each submit); without it, `mam send` refuses such a text
#   agent_remains(server, names: tuple[str, ...], ctx) -> Mapping[str, Remains] | Failure
#       (hook API 3) how the ended agents of `names` ended and their last lines, where the panes are kept
# and the ones `mam peek` and `mam attach` (mam.agents.peeking) look for:
#   read_pane(server, agent: Agent, lines: int, ctx) -> str | Failure   (the last lines of its screen, raw;
#       without it, peek reads the capture_panes screen)
#   attach_argv(server, agent: Agent, outer: Mapping[str, str], tty: str | None) -> list[str]
#       the backend's own client command that shows the agent's pane; `outer` is the caller's environment (read
#       only, to tell whether it runs inside that server already), `tty` the caller's terminal device or None


# The optional operations a backend may declare (BackendSpec.operations), each with the method of the backend
# object that runs it and what mam cannot do without it. list, bootstrap, classify and the scrub of its markers
# are not optional: every backend has them.
OPERATIONS: Mapping[str, tuple[str, str]] = {
    "spawn": ("spawn", "mam spawn and restore refuse it"),
    "stop": ("stop", "mam stop refuses it"),
    "send": ("send_text", "mam send refuses it"),
    "capture": ("capture_panes", "its agents' state is not read from their screens"),
    "state": ("agent_state", "no state of its own beyond the listing's"),
    "client_argv": ("client_argv", "mam exec and the shims refuse it"),
    "remains": ("agent_remains", "an ended agent's row keeps no exit status or last lines"),
}


# What `mam peek` and `mam attach` look for on a backend's object (never declared: it has the method or not), each
# with the method and what mam does without it. `mam backends` and the kit's report say which are left out.
LOOKED_FOR: Mapping[str, tuple[str, str]] = {
    "read_pane": ("read_pane", "mam peek reads the screen its capture gives"),
    "attach": ("attach_argv", "mam attach refuses it"),
}


def missing_methods(backend: object) -> list[str]:
    """The LOOKED_FOR names whose method the backend object does not have, in LOOKED_FOR's order."""
    return [name for name, (method, _) in LOOKED_FOR.items() if not callable(getattr(backend, method, None))]


def implemented_operations(backend: object) -> frozenset[str]:
    """The operations whose method the backend object has: what a BackendSpec without `operations` declares."""
    return frozenset(op for op, (method, _) in OPERATIONS.items() if callable(getattr(backend, method, None)))


@dataclass(frozen=True)
class ServerCommand:
    """A subcommand of a backend's CLI that reaches a server by a name of its own (`kill-session NAME`), past
    the server options. `mam exec` allows it only when the words after it are the name of the server mam names,
    once, and the declared flags: a missing name (the CLI picks a server itself), another name, or any other
    word (an option's value could be the real name) is refused."""

    words: tuple[str, ...]  # as spelled after the CLI's own options, one entry per alias: ("session", "stop")
    flags: tuple[str, ...] = ()  # its options that take no value and pick no server ("--force")
    every: bool = False  # it reaches every server (kill-all-sessions): always refused
    prefix: bool = False  # the CLI takes NAME as the prefix of another server's name when NAME is not running
    #                       (zellij attach): allowed only while the server mam names is up


@dataclass(frozen=True)
class ServerOptions:
    """The options of a backend's CLI that pick a server or socket. `mam exec` and the shims refuse them: the
    server is the one mam names, so a passed-through command line cannot reach another one."""

    names: tuple[str, ...] = ()  # "-L", "--session": also attached ("-Lx", "--session=x") and, when one letter,
    #                               inside a cluster of one-letter flags ("-NL x")
    valued: tuple[str, ...] = ()  # the CLI's other options that take a value ("-f FILE"), so that a value is
    #                               never taken for the command word
    before_command: bool = False  # True: options count only before the command word (tmux's getopt), the words
    #                               after it are the command's own (`capture-pane -S -5`); False: anywhere
    commands: tuple[ServerCommand, ...] = ()  # subcommands that name a server themselves


@dataclass(frozen=True)
class BackendSpec:
    """A backend a plugin declares. `load` imports the working module only when the backend is used."""

    name: str
    description: str
    executable: str | None  # the program it drives, for `mam backends`
    load: Callable[[], Backend]
    markers: tuple[str, ...] = ()  # env variables (or PREFIX_* patterns) it sets in its panes
    provider: str = field(default="", compare=False)  # filled in by the plugin manager
    server_options: ServerOptions = ServerOptions()  # refused in `mam exec` and the shims
    # Whether its bootstrap can start a server on another host through the runner (every process it starts goes
    # through mam.api.run); False for one that starts its server some other way, refused there with a hint.
    remote_bootstrap: bool = True
    # Why the backend cannot keep an agent name that mam's own rule accepts (tmux turns '.' into '_'), or None
    # when it can. The core asks before anything is written or started.
    name_rule: Callable[[str], str | None] | None = None
    # It runs an agent's argv itself on this machine, with the environment mam hands it (tmux, zellij; not herdr,
    # which types it into a shell of its own): spawn then checks that the program exists before anything starts.
    program_check: bool = False
    # It sets SpawnRequest.env in the agent's environment itself (tmux: `new-session -e`, herdr: `workspace
    # create --env`), so that the values never stand in the pane's start command, which the server keeps and shows.
    spawn_env: bool = False
    # The optional operations it offers, by their names in OPERATIONS ("spawn", "send", ...). None: whichever its
    # backend object has a method for. The kit (mam.testing) tests each declared one and fails a declared one
    # the object lacks; each one left out is a line of the kit's report.
    operations: frozenset[str] | None = None


@dataclass(frozen=True)
class ScrubRule:
    """Remove variables matching `pattern` (a name, or PREFIX_*); with `values`, only when the value is one."""

    pattern: str
    source: str
    values: frozenset[str] | None = None
