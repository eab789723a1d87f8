"""Calls to one host made at about the same time (the listings of a status fan-out), run in one ssh session.

Each call over ssh costs a session on the remote side (sshd forks, the login shell starts) whatever it runs;
a status over ten servers of a host would pay that ten times. Here the calls that arrive together are run by
one remote `sh` script, in parallel there, and their outputs come back framed by a fresh random nonce (a
command cannot print it in advance, so no output can forge a frame). Each caller gets the CommandResult it
would have got alone. For queries only: when the frames do not parse, each call runs again on its own.
"""

from __future__ import annotations

import re
import secrets
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from mam.calls import runner
from mam.calls.transport import SshTransport
from mam.plugin.records import CommandResult

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
WINDOW = 0.005  # seconds the first call waits for the others of its fan-out
EXPECTED_WINDOW = 0.1  # ...at most, when it knows how many there are (threads start late on a busy machine)


class Hop(Protocol):
    """What a batch reads of the route that hands it its calls (mam.calls.route.Route, which builds the batch):
    the host's transport, and the environment changes on the remote side."""

    @property
    def transport(self) -> SshTransport: ...

    @property
    def env_unset(self) -> tuple[str, ...]: ...

    @property
    def env_set(self) -> Mapping[str, str]: ...


def _alone(route: Hop, argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> CommandResult:
    return route.transport.run(argv, timeout=timeout, env=env, env_unset=route.env_unset, env_set=route.env_set)


@dataclass
class _Call:
    argv: tuple[str, ...]
    timeout: float
    env: Mapping[str, str]
    done: threading.Event = field(default_factory=threading.Event)
    result: CommandResult | None = None


def prelude(env_unset: Sequence[str], env_set: Mapping[str, str]) -> list[str]:
    """The route's environment changes as shell builtins (no `env`, no `sed`: each would be a process). A name
    of the PREFIX_* patterns is found in `export -p`; a value spanning words or lines can only add a name
    matching a prefix (unset needlessly), and a word that is not a name is passed over (unset would exit)."""
    exact = [name for name in env_unset if not name.endswith("*")]
    prefixes = [name[:-1] for name in env_unset if name.endswith("*")]
    for name in [*exact, *prefixes, *env_set]:
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a variable name: {name!r}")
    lines = []
    if prefixes:
        cases = "|".join(f"{prefix}*" for prefix in prefixes)
        lines += ["set -f", 'for w in $(export -p); do n=${w%%=*}; case $n in *[!A-Za-z0-9_]*|[0-9]*) ;; '
                  f'{cases}) unset "$n";; esac; done', "set +f"]
    if exact:
        lines.append("unset " + " ".join(exact))
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env_set.items()]
    return lines


def script(argvs: Sequence[Sequence[str]], nonce: str, setup: Sequence[str] = ()) -> str:
    """The remote sh script: `setup`, then every argv in the background with its own output files, each
    waited for by its pid (for its exit status), the frames written by the shell's builtins and everything
    printed by one `cat`: each process there costs a fork and an exec."""
    lines = [*setup, 'd=$(mktemp -d "${TMPDIR:-/tmp}/mam.XXXXXXXX") || exit 125', "trap 'rm -rf \"$d\"' EXIT"]
    for i, argv in enumerate(argvs):
        command = " ".join(shlex.quote(word) for word in argv)
        lines.append(f'{command} </dev/null >"$d/o{i}" 2>"$d/e{i}" & p{i}=$!')
    files = []
    for i in range(len(argvs)):
        lines += [f'wait "$p{i}"; r=$?', f"printf '\\n{nonce} {i} %s\\n' \"$r\" >\"$d/h{i}\"",
                  f"printf '\\n{nonce} e\\n' >\"$d/s{i}\""]
        files += [f'"$d/h{i}"', f'"$d/o{i}"', f'"$d/s{i}"', f'"$d/e{i}"']
    lines += [f"printf '\\n{nonce} end\\n' >\"$d/end\"", "cat " + " ".join(files) + ' "$d/end"']
    return "\n".join(lines)


def parse(stdout: str, nonce: str, count: int) -> list[tuple[int | None, str, str]] | None:
    """(returncode, stdout, stderr) of each command, in order; None when the frames are not exactly those."""
    parts = stdout.split(f"\n{nonce} ")
    if parts[0] != "" or len(parts) != 2 * count + 2 or parts[-1] != "end\n":
        return None
    out: list[tuple[int | None, str, str]] = []
    for i in range(count):
        head, _, text = parts[1 + 2 * i].partition("\n")
        err_head, _, err = parts[2 + 2 * i].partition("\n")
        index, _, code = head.partition(" ")
        if index != str(i) or err_head != "e":
            return None
        out.append((int(code) if code.isdigit() else None, text, err))
    return out


class Batch:
    """Gathers the calls made within WINDOW of each other (or, the first time, until `expected` have come) and
    runs them together on the route's host. One per fan-out: `Route.batched()`."""

    def __init__(self, expected: int | None = None, window: float | None = None) -> None:
        self.expected = expected
        self.window = window if window is not None else WINDOW if expected is None else EXPECTED_WINDOW
        self._lock = threading.Condition()
        self._pending: list[_Call] = []

    def run(self, route: Hop, argv: Sequence[str], *, timeout: float, env: Mapping[str, str]) -> CommandResult:
        call = _Call(tuple(argv), timeout, env)
        with self._lock:
            self._pending.append(call)
            leader = len(self._pending) == 1
            if leader:
                self._lock.wait_for(lambda: self.expected is not None and len(self._pending) >= self.expected,
                                    timeout=self.window)
                calls, self._pending = self._pending, []
                # `expected` counts the first wave (the listings); later calls (a status's captures, a down
                # server's checks) come as they come: they gather for the short window only.
                self.expected, self.window = None, min(self.window, WINDOW)
            else:
                self._lock.notify_all()
        if leader:
            self._execute(route, calls)
        call.done.wait()
        assert call.result is not None
        return call.result

    def _execute(self, route: Hop, calls: list[_Call]) -> None:
        started = time.monotonic()
        try:
            if len(calls) == 1:
                calls[0].result = _alone(route, calls[0].argv, calls[0].timeout, calls[0].env)
                return
            nonce = "mam-" + secrets.token_hex(16)
            for c in calls:
                if not c.argv or c.argv[0].startswith("-") or any("\0" in word for word in c.argv):
                    raise ValueError("an argv the remote shell cannot run")  # each alone says why
            body = script([c.argv for c in calls], nonce, prelude(route.env_unset, route.env_set))
            timeout = max(c.timeout for c in calls)
            # The script applies the route's environment itself: one sh, no env or sed processes.
            whole = route.transport.run(["sh", "-c", body, "sh"], timeout=timeout, env=calls[0].env,
                                        limit=len(calls) * runner.max_output())  # each call's share
            framed = parse(whole.stdout, nonce, len(calls)) if whole.returncode == 0 else None
            # All of them printed more than their shares together: each is asked again on its own, so that only
            # the one that prints too much goes unread (one pane's screen must not blind another server's).
            if (whole.transport_error is not None and not whole.over_limit) or whole.timed_out:
                for c in calls:  # ssh itself failed or hung: so would each of them have
                    c.result = CommandResult(c.argv, None, "", whole.stderr, timed_out=whole.timed_out,
                                             timeout=c.timeout, transport_error=whole.transport_error)
            elif framed is None:
                _run_each(route, calls, started)
            else:
                for c, (code, out, err) in zip(calls, framed, strict=True):
                    c.result = route.transport.finish(c.argv, c.timeout, CommandResult(c.argv, code, out, err))
        except ValueError:
            _run_each(route, calls, started)
        finally:
            for c in calls:
                if c.result is None:
                    c.result = CommandResult(c.argv, None, timeout=c.timeout, os_error=f"{c.argv[0]}: not run")
                c.done.set()


def _run_each(route: Hop, calls: Sequence[_Call], started: float) -> None:
    """Run each call again on its own, all at once, each within what is left of its own time limit (counted
    from `started`, when the batch began): a batch that failed must not cost its calls one after another (eight
    hung servers were eight time limits), nor any call more than its one time limit."""
    def one(call: _Call) -> None:
        left = call.timeout - (time.monotonic() - started)
        if left <= 0:
            call.result = CommandResult(call.argv, None, "", "", timed_out=True, timeout=call.timeout)
        else:
            result = _alone(route, call.argv, left, call.env)
            call.result = replace(result, timeout=call.timeout) if result.timed_out else result

    if len(calls) == 1:
        one(calls[0])
        return
    threads = [threading.Thread(target=one, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
