"""Claude Code: hooks in ~/.claude/settings.json (code.claude.com/docs/en/hooks). A prompt sent starts work, a
tool that has run means it works on (after a permission prompt too), a permission prompt blocks, Stop ends the
turn. Claude Code fires no hook on Esc: the screen change after the report sets it aside (docs/states.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mam.hooks.common import home
from mam.hooks.jsonhooks import make


def settings(env: Mapping[str, str]) -> Path:
    folder = env.get("CLAUDE_CONFIG_DIR")
    return (Path(folder) if folder else home(env) / ".claude") / "settings.json"


KIND = make("claude", settings, [
    ("SessionStart", None, "idle"),
    ("UserPromptSubmit", None, "working"),
    ("PostToolUse", "*", "working"),
    ("Notification", "permission_prompt", "blocked"),
    ("Stop", None, "idle"),
])
