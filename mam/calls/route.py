"""Where a backend's calls run: a Route sends them to another host through ssh (mam.calls.transport), with the
route's environment on the remote side. Entered around the calls (`remote_route`), so a backend builds the
same argv whatever the host; mam.calls.runner hands each call of the context to the route."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar

from mam.calls import runner
from mam.plugin.helpers import first_line
from mam.plugin.records import CommandResult, ErrorKind, ServerError

if TYPE_CHECKING:  # the transport is imported only by a command that reaches another host
    from mam.calls.transport import SshTransport

T = TypeVar("T")
P = ParamSpec("P")

# What the local ssh client runs with: enough to find itself, its config and keys (agent) and a locale, nothing
# a user's `SendEnv` could forward (the caller's markers never leave this machine).
SSH_CLIENT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK", "KRB5CCNAME", "LANG", "TERM")


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
        return run_remote(self, argv, timeout=timeout, env=env, stdin=stdin)

    def client_argv(self, argv: Sequence[str]) -> list[str]:
        """The local argv of an interactive client (attach, `mam exec`) on the host: ssh with a terminal."""
        return self.transport.wrap(argv, self.env_unset, self.env_set, tty=True)

    def ssh_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k in SSH_CLIENT_ENV or k.startswith("LC_")}


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


def run_remote(route: Route, argv: Sequence[str], *, timeout: float, env: Mapping[str, str],
               limit: int | None = None, stdin: bytes | None = None) -> CommandResult:
    """`argv` on the route's host. The result is the remote command's, under the backend's own argv, as if it
    had run here; ssh's own failures come back as `transport_error` (never down), so no backend reads them.
    The remote command runs in the login's home directory (a `cwd` names a folder of this machine) and with
    the login's environment, less the scrub's markers: `env` is only for the local ssh client."""
    from mam.util.errors import MamError

    args = tuple(argv)
    host = route.host
    try:
        wrapped = route.transport.wrap(args, route.env_unset, route.env_set)
    except ValueError as exc:
        return CommandResult(args, None, timeout=timeout, os_error=f"{args[0] if args else '?'}: cannot run on "
                             f"{host}: {exc}")
    except MamError as exc:  # the folder of the shared connections is refused
        return CommandResult(args, None, timeout=timeout,
                             transport_error=ServerError(ErrorKind.UNKNOWN, f"ssh to {host}: {exc.message}"))
    limit = runner.max_output() if limit is None else limit
    raw = route.transport.clean(runner.run_local(wrapped, timeout=timeout, env=route.ssh_env(env), limit=limit,
                                                 stdin=stdin))
    if raw.os_error == runner.over_limit(wrapped[0], limit):  # the remote command's answer, not ssh's failure
        return CommandResult(args, None, timeout=timeout, over_limit=True, transport_error=ServerError(
            ErrorKind.UNKNOWN, f"ssh to {host}: {runner.over_limit(args[0], limit)}"))
    error = route.transport.classify(raw)
    if error is not None:
        return CommandResult(args, None, "", raw.stderr, timeout=timeout, transport_error=error)
    if raw.timed_out:  # ssh or the remote command hung: the remote command may still run there
        return CommandResult(args, None, timed_out=True, timeout=timeout, transport_error=ServerError(
            ErrorKind.TIMEOUT, f"ssh to {host}: {args[0]} gave no answer within {timeout:g} s"))
    if raw.returncode is not None and raw.returncode < 0:
        return CommandResult(args, None, "", raw.stderr, timeout=timeout, transport_error=ServerError(
            ErrorKind.UNKNOWN, f"ssh to {host}: ssh was killed by signal {-raw.returncode}"))
    return finish_remote(route, args, timeout, raw)


def finish_remote(route: Route, args: tuple[str, ...], timeout: float, raw: CommandResult) -> CommandResult:
    """The remote command's own result, under the backend's argv."""
    if raw.returncode == 127 and _remote_not_found(args[0], raw.stderr):
        return CommandResult(args, None, "", raw.stderr, not_found=True, timeout=timeout, transport_error=ServerError(
            ErrorKind.NOT_INSTALLED, f"{args[0]}: not found on PATH on {route.host}"))
    return CommandResult(args, raw.returncode, raw.stdout, raw.stderr, timeout=timeout)


def _remote_not_found(program: str, stderr: str) -> bool:
    """The remote shell's or env's word that `program` is not there (`env: 'tmux': No such file or directory`,
    `sh: 1: tmux: not found`, `bash: line 1: tmux: command not found`)."""
    last = first_line("\n".join(reversed(stderr.splitlines())))
    return program in last and ("not found" in last or "No such file or directory" in last)
