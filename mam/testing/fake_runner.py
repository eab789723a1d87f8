"""A stand-in for `mam.calls.runner.run`, so a backend can be tested without its binary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mam.plugin.records import CommandResult


@dataclass
class FakeRunner:
    """Answers each call from a table of argv prefixes (longest match wins) and records every call.

    A call that matches nothing gets "not found on PATH", as a missing binary would.
    """

    answers: dict[tuple[str, ...], tuple[int | None, str, str]] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    stdins: list[bytes | None] = field(default_factory=list)  # what each call got on stdin (None: nothing)

    def answer(self, prefix: Sequence[str], returncode: int | None = 0, stdout: str = "", stderr: str = "") -> None:
        self.answers[tuple(prefix)] = (returncode, stdout, stderr)

    def __call__(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str],
                 cwd: str | None = None, stdin: bytes | None = None) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        self.stdins.append(stdin)
        matches = [p for p in self.answers if args[: len(p)] == p]
        if not matches:
            return CommandResult(args, None, not_found=True, timeout=timeout)
        returncode, stdout, stderr = self.answers[max(matches, key=len)]
        if returncode is None:
            return CommandResult(args, None, stdout, stderr, timed_out=True, timeout=timeout)
        return CommandResult(args, returncode, stdout, stderr, timeout=timeout)
