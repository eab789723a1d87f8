"""Facts read from the machine a backend's processes run on: this one, or the host its calls go to (mam.calls.route).

The remote side is asked through `runner.run`, looked up at each call, so a test's fake runner answers it too."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from mam.calls import runner


def read_text(path: str, *, timeout: float, env: Mapping[str, str]) -> str | None:
    """The text of the file at `path` on the machine the backend runs on (here, or the route's host), None
    when it cannot be read. For a backend's look at system state (/proc) that must be the server's machine."""
    if runner.elsewhere() is None:  # no newline translation, and never more than one answer may be
        limit = runner.max_output()
        try:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
        except OSError:
            return None
        return data.decode("utf-8", "replace") if len(data) <= limit else None
    result = runner.run(["cat", "--", path], timeout=timeout, env=env)
    return result.stdout if result.returncode == 0 else None


_NAMESPACE_LINE = re.compile(r"^(net:\[[0-9]+\]) /proc/([0-9]+)/ns$")


def net_namespaces(*, timeout: float, env: Mapping[str, str]) -> dict[str, list[str]] | None:
    """The network namespaces of the processes whose /proc entries can be read on the machine the backend runs
    on (here, or the route's host), each with those processes' pids; None when there is no /proc to tell (macOS,
    BSD, a sandbox that hides it). /proc/PID/net/unix is the socket table of PID's namespace."""
    spaces: dict[str, list[str]] = {}
    if runner.elsewhere() is None:
        try:
            pids = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
        except OSError:
            return None
        for pid in pids:
            try:
                spaces.setdefault(os.readlink(f"/proc/{pid}/ns/net"), []).append(pid)
            except OSError:  # another user's process, or one that ended
                pass
        return {ns: p for ns, p in spaces.items() if ns.startswith("net:")} or None
    result = runner.run(["find", "/proc", "-mindepth", "3", "-maxdepth", "3", "-path", "/proc/[0-9]*/ns/net",
                         "-lname", "net:*", "-printf", "%l %h\n"], timeout=timeout, env=env)
    if result.returncode is None:  # other users' processes make find exit 1: what it could read still counts
        return None
    for line in result.stdout.splitlines():
        match = _NAMESPACE_LINE.match(line)
        if match is not None:
            spaces.setdefault(match[1], []).append(match[2])
    return spaces or None  # find itself is always there: nothing listed is no look at all
