"""Where a backend's calls run: a Route sends them to another host through ssh (mam.calls.transport), with the
route's environment on the remote side. Entered around the calls (`remote_route`), so a backend builds the
same argv whatever the host; mam.calls.runner hands each call of the context to the route."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar

from mam.calls import runner
from mam.plugin.records import CommandResult

if TYPE_CHECKING:  # the transport is imported only by a command that reaches another host
    from mam.calls.transport import SshTransport

T = TypeVar("T")
P = ParamSpec("P")


class Gathering(Protocol):
    """The calls of one fan-out run together in one ssh session (mam.calls.batch.Batch)."""

    def run(self, route: Route, argv: Sequence[str], *, timeout: float, env: Mapping[str, str]) -> CommandResult: ...


@dataclass(frozen=True)
class Route:
    """Where the current backend calls run: through `transport` on another host, with `env_unset` (names and
    PREFIX_* patterns) unset and `env_set` set on the remote side of every call."""

    transport: SshTransport
    env_unset: tuple[str, ...] = ()
    env_set: Mapping[str, str] = field(default_factory=dict)
    batch: Gathering | None = field(default=None, compare=False)  # calls made together share one ssh session

    def batched(self, expected: int | None = None, window: float | None = None) -> Route:
        """This route for one fan-out of queries: the calls made together (`expected` of them, or those within
        `window` seconds of the first) run in one ssh session on the host (mam.calls.batch). Never for a call that
        changes anything: a batch whose answer does not parse runs each call again on its own."""
        from dataclasses import replace

        from mam.calls.batch import Batch  # only a fan-out to another host needs it

        return replace(self, batch=Batch(expected, window))

    @property
    def host(self) -> str:
        return self.transport.host

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str],
            stdin: bytes | None = None) -> CommandResult:
        """One call of the context on this route's host (runner.run hands it here): in the fan-out's batch when
        there is one (never a call with its own stdin: a batch shares one), else alone."""
        if self.batch is not None and stdin is None:
            return self.batch.run(self, argv, timeout=timeout, env=env)
        return self.transport.run(argv, timeout=timeout, env=env, env_unset=self.env_unset, env_set=self.env_set,
                                  stdin=stdin)

    def client_argv(self, argv: Sequence[str]) -> list[str]:
        """The local argv of an interactive client (attach, `mam exec`) on the host: ssh with a terminal."""
        return self.transport.wrap(argv, self.env_unset, self.env_set, tty=True)

    def ssh_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return self.transport.ssh_env(env)


def current_route() -> Route | None:
    place = runner.elsewhere()
    return place if isinstance(place, Route) else None


@contextmanager
def remote_route(route: Route | None) -> Iterator[Route | None]:
    """Every `run` inside goes through `route` (None: runs here), in this thread and context only."""
    with runner.running_elsewhere(route):
        yield route


def with_route(route: Route | None, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` under `route`: for a worker thread, which does not inherit the caller's context."""
    with remote_route(route):
        return fn(*args, **kwargs)
