"""The wrapper: every hook, each logged to $MAM_WRAP_LOG (one JSON line per call) when that is set.

For the echo backend, which has no `spawn`, `stop`, `client_argv`, `send_text` or states, it answers those
hooks itself, keeping the agents it started in the JSON file $MAM_WRAP_STATE (server -> names) and adding them
to echo's listing. For every other backend it returns None, so that the next implementation answers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from mam.api import (
    HOOK_API,
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
    hookimpl,
)

NEEDS_HOOK_API = HOOK_API  # the version of the hook set it was written for: an older mam refuses to load it


def _log(hook: str, backend: Backend | None = None, **facts: object) -> None:
    path = os.environ.get("MAM_WRAP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"hook": hook, "backend": backend.name if backend else None, **facts}) + "\n")


def _mine(backend: Backend) -> bool:
    return backend.name == "echo" and bool(os.environ.get("MAM_WRAP_STATE"))


def _state() -> dict[str, list[str]]:
    try:
        with open(os.environ["MAM_WRAP_STATE"], encoding="utf-8") as handle:
            state: dict[str, list[str]] = json.load(handle)
            return state
    except FileNotFoundError:
        return {}


def _save(state: dict[str, list[str]]) -> None:
    with open(os.environ["MAM_WRAP_STATE"], "w", encoding="utf-8") as handle:
        json.dump(state, handle)


@hookimpl
def mam_backends() -> list[BackendSpec]:
    _log("mam_backends")
    return []  # it declares no backend of its own


@hookimpl
def mam_list_agents(backend: Backend, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure | None:
    _log("mam_list_agents", backend, server=server)
    if not _mine(backend):
        return None
    listing = backend.list_agents(server, ctx)
    if isinstance(listing, Failure):
        return listing
    return listing + tuple(Agent(name=n, agent="wrapped", pane_id=f"w-{n}") for n in _state().get(server, ()))


@hookimpl
def mam_bootstrap_server(backend: Backend, server: str, ctx: BootstrapContext) -> BootstrapResult | None:
    _log("mam_bootstrap_server", backend, server=server)
    return None


@hookimpl
def mam_env_scrub_rules() -> list[ScrubRule]:
    _log("mam_env_scrub_rules")
    return [ScrubRule("WRAP_SECRET", "plugin wrap")]


@hookimpl
def mam_classify_error(backend: Backend, failure: Failure) -> ServerError | None:
    _log("mam_classify_error", backend, server=failure.server)
    return None  # it recognises nothing: echo's own classify answers


@hookimpl
def mam_spawn_agent(backend: Backend, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult | None:
    _log("mam_spawn_agent", backend, server=server, name=request.name)
    if not _mine(backend):
        return None
    state = _state()
    state.setdefault(server, []).append(request.name)
    _save(state)
    return SpawnResult(True, f"wrap started {request.name}", pane_id=f"w-{request.name}")


@hookimpl
def mam_stop_agent(backend: Backend, server: str, name: str, ctx: CallContext) -> StopResult | None:
    _log("mam_stop_agent", backend, server=server, name=name)
    if not _mine(backend):
        return None
    state = _state()
    if name not in state.get(server, []):
        return StopResult(False, f"{name} was not running on echo server {server}")
    state[server].remove(name)
    _save(state)
    return StopResult(True, f"wrap stopped {name}")


@hookimpl
def mam_client_argv(backend: Backend, server: str, args: list[str]) -> list[str] | None:
    _log("mam_client_argv", backend, server=server)
    return ["echo", f"echo-server={server}", *args] if _mine(backend) else None


@hookimpl
def mam_agent_state(backend: Backend, server: str, agent: Agent, ctx: CallContext) -> AgentState | None:
    _log("mam_agent_state", backend, server=server, name=agent.name)
    if not _mine(backend) or agent.agent != "wrapped":
        return None  # echo's own agents: their screens are read (mam_capture_panes)
    return AgentState("idle", "backend", {"field": "wrap", "value": "idle"})


@hookimpl
def mam_capture_panes(backend: Backend, server: str, agents: tuple[Agent, ...],
                      ctx: CallContext) -> Mapping[str, PaneCapture] | Failure | None:
    _log("mam_capture_panes", backend, server=server, names=[a.name for a in agents])
    if not _mine(backend):
        return None
    return {a.name: PaneCapture(None, dead=True, dead_status="exit status 0") for a in agents if a.name}


@hookimpl
def mam_send_text(backend: Backend, server: str, agent: Agent, text: str, enter: bool,
                  ctx: CallContext) -> SendResult | None:
    _log("mam_send_text", backend, server=server, name=agent.name, text=text, enter=enter)
    return SendResult(True, f"wrap typed into {agent.name}") if _mine(backend) else None


@hookimpl
def mam_agent_remains(backend: Backend, server: str, names: tuple[str, ...],
                      ctx: CallContext) -> Mapping[str, Remains] | Failure | None:
    _log("mam_agent_remains", backend, server=server, names=list(names))
    if not _mine(backend):
        return None
    return {name: Remains(exit_status=0, lines=(f"{name} ended under wrap",)) for name in names}
