"""Helpers for backends that find an agent by listing their server (herdr, zellij): shared, not a hook."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

from mam.plugin.records import Agent, Backend, CallContext, ErrorKind, Failure, ServerError, StopResult


class Hooks(Protocol):
    def list_agents(self, backend: Backend, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure: ...

    def classify(self, backend: Backend, failure: Failure) -> ServerError: ...


# The plugin manager whose stop hook is running: its listing and classification go through the hooks (and the
# core's process facts), never around them. Unset when a backend is driven alone (the conformance kit).
ACTIVE_HOOKS: ContextVar[Hooks | None] = ContextVar("mam_active_hooks", default=None)


def find_for_stop(backend: Backend, server: str, name: str, ctx: CallContext,
                  force: bool = False) -> Agent | StopResult:
    """The live agent `name` with a pane id, or the StopResult to return when there is nothing to close:
    the server is down or the agent is gone (not an error), the server could not be listed (an error), or the
    listing shows that mam did not make it (`Agent.foreign`) and `force` is not given (left running)."""
    hooks = ACTIVE_HOOKS.get()
    listing = hooks.list_agents(backend, server, ctx) if hooks is not None else backend.list_agents(server, ctx)
    if isinstance(listing, Failure):
        down = hooks.classify(backend, listing) if hooks is not None else backend.classify(listing)
        if down is not None and down.kind is ErrorKind.SERVER_DOWN:
            return StopResult(False, f"{backend.name} server {server} is down")
        return StopResult(False, f"could not list the agents of {backend.name} server {server}", failure=listing)
    agent = next((a for a in listing if a.name == name and a.pane_id is not None), None)
    if agent is None:
        return StopResult(False, f"{name} was not running on {backend.name} server {server}")
    if agent.foreign and not force:
        return StopResult(False, f"{name} on {backend.name} server {server} was not started by mam: left running",
                          foreign=True)
    return agent
