"""The hook specifications of mam: the whole contract between the core and a backend plugin.

A plugin is any object or module with functions named like these, marked with `mam.hookimpl`.
Hooks are always called with keyword arguments; an implementation may take any subset of them.
Every hook that takes a `backend` is called for every backend: an implementation returns None for a backend
it does not own, so the next implementation (in the end the core's own) answers.

`HOOK_API` is the version of this set of hooks. It grows by one whenever a hook is added, or a parameter is
added to one; each hook says since which version it exists. A change that would break an implementation is
never made under the same names.
"""

from __future__ import annotations

from collections.abc import Mapping

import pluggy

from mam.plugin.records import (
    Agent,
    AgentState,
    Backend,
    BackendSpec,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    Failure,
    PaneCapture,
    Remains,
    ScrubRule,
    SendResult,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
)

HOOK_API = 4

hookspec = pluggy.HookspecMarker("mam")
#: Mark a plugin's implementation of one of the hooks below.
hookimpl = pluggy.HookimplMarker("mam")


@hookspec
def mam_backends() -> list[BackendSpec]:
    """Declare the backends this plugin provides.

    Broadcast: every plugin answers. A backend name declared by two plugins is an error naming both.
    Keep it cheap: return records only, and import the backend's working module inside `BackendSpec.load`.

    Since hook API 1.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_list_agents(backend: Backend, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure | None:
    """List the live agents of `server`, in the backend's own order.

    :param backend: the loaded backend object the server belongs to.
    :param server: a validated server name.
    :param ctx: the time limit and environment for the backend's processes.
    :return: the agents (an empty tuple is a confirmed "no agents"), or a `Failure` when the server gave no
        usable answer; the classify hook then decides whether it is down or unknown. The core's default
        implementation (trylast) calls `backend.list_agents`; a wrapper may time, cache or filter it.

    Since hook API 1.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_bootstrap_server(backend: Backend, server: str, ctx: BootstrapContext) -> BootstrapResult | None:
    """Start `server` if it is down and wait, at most `ctx.wait` seconds, until it reports it runs.

    :param ctx: carries the already scrubbed environment, the log file and the time limits.
    :return: whether it was started by this call and whether it is up. Starting is idempotent: a server
        that is up is never started again. The core's default implementation calls `backend.bootstrap`.

    Since hook API 1.
    """
    raise NotImplementedError


@hookspec
def mam_env_scrub_rules() -> list[ScrubRule]:
    """Name the environment variables a server must not inherit (names or `PREFIX_*` patterns).

    Broadcast: the union of every loaded plugin's rules applies, so starting one multiplexer from inside
    another drops the other's markers too. Return rules only; never change `os.environ`.

    Since hook API 1.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_classify_error(backend: Backend, failure: Failure) -> ServerError | None:
    """Say what a failed backend call means.

    Only failures that are not facts about the process reach the implementations: a program not on PATH,
    past its time limit, or killed by a signal is classified by the core before any of them runs.

    :return: a `ServerError` whose kind is `server_down` only when the backend said so by its own
        unambiguous signal, or None when this plugin does not positively recognise the failure. The core's
        default implementation (trylast) asks `backend.classify`, then falls back to bad_output or
        unknown: it never guesses "down".

    Since hook API 1.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_spawn_agent(backend: Backend, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult | None:
    """Start one agent on a running `server`, in a new pane or session named `request.name`.

    :param ctx: `ctx.env` is already scrubbed; the agent's process must get exactly that environment.
    :return: whether the backend accepted it, and the pane it made. The core registers the row and then
        waits until the agent is listed. The core's default implementation calls `backend.spawn`.

    Since hook API 1.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_stop_agent(backend: Backend, server: str, name: str, ctx: CallContext, force: bool) -> StopResult | None:
    """Close the pane or session of agent `name` on `server`, killing its processes: only one mam made.

    A pane or session of that name that carries no mark of mam's (tmux: no `@mam_pane`; zellij: not a command
    pane mam named; herdr: no agent herdr knows by that name, which only `agent start` gives) is someone else's:
    it is left running and answered `StopResult(False, message, foreign=True)`, whatever the registry says.

    :param force: close it even without mam's mark: the user named this one agent with `mam stop NAME --force`
        (never `mam stop --all`, never a row alone). The core's default implementation calls `backend.stop`,
        with `force=True` only when it is true and the method takes a `force` keyword (hook API 4).
    :return: `stopped` True when it ran and is closed, False when it was already gone (not an error), or when
        it was left as someone else's (`foreign`).

    Since hook API 1 (`force` since hook API 4).
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_client_argv(backend: Backend, server: str, args: list[str]) -> list[str] | None:
    """The argv that runs the backend's own CLI with `args` against `server` (`mam exec`, the shim).

    :return: e.g. `["herdr", "--session", server, *args]` or `["tmux", "-L", server, *args]`. The core's
        default implementation calls `backend.client_argv`.

    Since hook API 1.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_agent_state(backend: Backend, server: str, agent: Agent, ctx: CallContext) -> AgentState | None:
    """The state of one live agent, from the backend's own notion of it (herdr's `agent_status`).

    :param agent: as the listing gave it; `agent.state` holds the backend's own field when the listing has one.
    :return: an `AgentState` with source `backend`, or None when the backend has no state of its own: the
        core then captures the pane (`mam_capture_panes`) and reads the screen with its rules. The core's
        default implementation (trylast) calls `backend.agent_state` when it has one, else reads
        `agent.state` when it is one of the five states. Queries only: it must never start or change anything.

    Since hook API 2.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_capture_panes(backend: Backend, server: str, agents: tuple[Agent, ...],
                      ctx: CallContext) -> Mapping[str, PaneCapture] | Failure | None:
    """The visible text, and what the multiplexer knows, of the panes of `agents` (all live, all of `server`).

    One call for the whole server where the backend allows it (tmux runs one command sequence); it runs in the
    same parallel fan-out as the listing.

    :return: a `PaneCapture` per agent name (an agent left out reads `unknown`), or a `Failure` when the
        server gave no usable answer. The core's default implementation (trylast) calls
        `backend.capture_panes`; None (no such method) reports every agent `unknown` with source `none`.
        Never starts a server, never types into a pane.

    Since hook API 2.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_send_text(backend: Backend, server: str, agent: Agent, text: str, enter: bool,
                  ctx: CallContext) -> SendResult | None:
    """Type `text` into the pane of the live `agent`, as literal characters (never key names), then Enter
    when `enter`. The server is running (the core checked it by listing); it is never started. `text` holds no
    control character but tab, and newlines only for a backend with `pastes_lines = True`: it sends such a text
    as one paste (never as lines that each submit), or refuses it.

    :return: whether the backend took it. The core's default implementation (trylast) calls
        `backend.send_text`, or refuses a backend without one.

    Since hook API 2.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mam_agent_remains(backend: Backend, server: str, names: tuple[str, ...],
                      ctx: CallContext) -> Mapping[str, Remains] | Failure | None:
    """How the agents of `names` (registered active, no longer listed as alive on `server`) ended, and the last
    lines their panes showed, for the agents whose ended pane the multiplexer still keeps (tmux
    `remain-on-exit`). Asked before anything closes those panes.

    :return: a `Remains` per agent name it could read (an agent left out: nothing kept), or a `Failure`. The
        core's default implementation (trylast) calls `backend.agent_remains`; None (no such method) means the
        backend keeps nothing. Queries only: it never starts, closes or types into anything.

    Since hook API 3.
    """
    raise NotImplementedError
