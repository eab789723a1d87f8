"""The one error type the core raises; the CLI turns it into a `mam: ...` line and an exit code."""

from __future__ import annotations

# Exit codes (docs/cli.md, "Exit codes").
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_BACKEND_NOT_FOUND = 3
EXIT_PLUGIN_LOAD = 4

_EXIT_BY_CODE = {
    "usage": EXIT_BAD_INPUT,
    "invalid_name": EXIT_BAD_INPUT,
    "invalid_registry": EXIT_BAD_INPUT,
    "invalid_config": EXIT_BAD_INPUT,
    "invalid_workspace": EXIT_BAD_INPUT,
    "backend_not_found": EXIT_BACKEND_NOT_FOUND,
    "backend_unavailable": EXIT_BACKEND_NOT_FOUND,
    "plugin_load_failed": EXIT_PLUGIN_LOAD,
    "operation_failed": EXIT_FAILED,
}


MAX_MESSAGE = 1000  # whatever a message quotes (a name, a path, a backend's stderr), it stays a readable line


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


class MamError(Exception):
    """A failure the user can act on: a stable `code`, a one-line message and an optional hint."""

    def __init__(self, code: str, message: str, hint: str | None = None, *, refusal: bool = False) -> None:
        """`refusal`: mam declined to act by its own rule (a prompt to a blocked agent, an untrusted spec) and
        touched nothing; the audit trail says `refused` for it (bad input, exit 2, always is)."""
        if code not in _EXIT_BY_CODE:
            raise ValueError(f"unknown error code {code!r}")
        message, hint = _bounded(message), None if hint is None else _bounded(hint)
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.refusal = refusal or _EXIT_BY_CODE[code] == EXIT_BAD_INPUT

    @property
    def exit_code(self) -> int:
        return _EXIT_BY_CODE[self.code]

    def as_json(self) -> dict[str, object]:
        return {"schema": 1, "error": {"code": self.code, "message": self.message, "hint": self.hint}}
