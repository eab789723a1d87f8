"""`mam hooks install|uninstall|status`: mam's entries in each agent's own hook configuration, each running
`mam report STATE` (mam.hooks.report), so that the agent says its own state (docs/hooks.md).

One module per kind with a hook configuration (claude, gemini: settings.json hooks; codex: config.toml's
`notify` and hooks.json). Every edit merges into the user's file, keeps a backup, refuses a file it cannot parse, and
uninstall takes out mam's entries only: install then uninstall leaves the file as it was, byte for byte.
"""

from __future__ import annotations

from mam.hooks.common import Change, KindFile

# Deferred imports (inside functions), for start-up: each kind's hook module loads only when the kinds are listed.

# Kinds mam knows that have no hook configuration a command can be put in, and what they have instead.
WITHOUT_HOOKS = {
    "opencode": "OpenCode's hooks are JavaScript plugins, not commands in its settings",
    "aider": "Aider has no hooks",
    "cursor": "Cursor's agent CLI has no hooks mam can install",
    "grok": "Grok Build has no hook settings mam knows of",
    "hermes": "Hermes has no hook settings mam knows of",
}


def kinds() -> dict[str, list[KindFile]]:
    """Each kind's hook files (Codex has two: config.toml's `notify` and hooks.json)."""
    from mam.hooks import claude, codex, gemini

    return {"claude": [claude.KIND], "codex": [codex.KIND, codex.HOOKS], "gemini": [gemini.KIND]}


__all__ = ["WITHOUT_HOOKS", "Change", "KindFile", "kinds"]
