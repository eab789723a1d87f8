"""Gemini CLI: hooks in ~/.gemini/settings.json (geminicli.com/docs/hooks). BeforeAgent starts a turn, AfterTool
continues it, Notification is a tool's permission prompt, AfterAgent ends the turn. Older builds need hooks
switched on in the same file (`tools.enableHooks`); mam does not turn that on for you."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mam.hooks.common import home
from mam.hooks.jsonhooks import make


def settings(env: Mapping[str, str]) -> Path:
    return home(env) / ".gemini" / "settings.json"


def _named(event: str, state: str) -> dict[str, Any]:
    return {"name": f"mam-report-{state}"}


KIND = make("gemini", settings, [
    ("SessionStart", "*", "idle"),
    ("BeforeAgent", "*", "working"),
    ("AfterTool", "*", "working"),
    ("Notification", "*", "blocked"),
    ("AfterAgent", "*", "idle"),
], _named)
