"""Codex: two files in ~/.codex ($CODEX_HOME).

- `notify` in config.toml, a program Codex runs at the end of each turn with the event as a JSON argument
  (agent-turn-complete), which `mam report` ignores: idle. TOML is edited line by line, never re-written: mam's
  two lines (a comment and `notify = [...]`) go first in the file, where keys are top-level, and uninstall takes
  out exactly those lines.
- Lifecycle hooks in hooks.json, the shape Claude Code's settings have (mam.hooks.jsonhooks). Read in Codex's
  source (openai/codex, codex-rs): the file is `hooks.json` in each config folder
  (hooks/src/engine/discovery.rs); the events are those of `HOOK_EVENT_NAMES` (hooks/src/lib.rs), of which mam
  takes SessionStart, UserPromptSubmit, PostToolUse, PermissionRequest and Stop; they run when the feature
  `hooks` is on (`Feature::CodexHooks`, features/src/lib.rs: stable and on by default in the source read; its
  older key `codex_hooks` is an alias, features/src/legacy.rs), which mam reports and never switches; and the
  user's trust in each hook is kept in config.toml as `[hooks.state."<file>:<event>:<group>:<handler>"]`
  with `trusted_hash` and `enabled` (hook_key in hooks/src/lib.rs, hooks/src/config_rules.rs), which status
  reads (whether a hash is recorded, not whether it is still the hook's)."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mam.hooks.common import PROGRAM, KindFile, Unparsable, home, program, programs, read
from mam.hooks.jsonhooks import Event, groups_of_ours, make
from mam.util.quote import shown

MARK = "# mam hooks install: Codex runs this at the end of each turn (`mam hooks uninstall` removes it)"


def our_argv(by: str) -> list[str]:
    return [by, "report", "idle"]


def notify_line(by: str) -> str:
    """mam's `notify` line, running `by` (JSON's escapes in a list of strings are TOML's)."""
    return f"notify = {json.dumps(our_argv(by))}"


NOTIFY = notify_line(PROGRAM)  # the line a plain install writes


def config(env: Mapping[str, str]) -> Path:
    folder = env.get("CODEX_HOME")
    return (Path(folder) if folder else home(env) / ".codex") / "config.toml"


def _parse(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Unparsable(f"not TOML: {exc}") from None
    except RecursionError:
        raise Unparsable("nested deeper than mam reads") from None


def add(text: str | None) -> str:
    data = _parse(text) if text is not None else {}
    if "notify" in data:
        raise Unparsable(f"it already has notify = {shown(data['notify'], quote='repr')}: Codex runs one notify "
                         "program, and mam "
                         "would replace yours (make yours run `mam report idle` too)")
    end = "\r\n" if text and "\r\n" in text else "\n"  # the file's own line ends
    return f"{MARK}{end}{notify_line(program())}{end}" + (text or "")


def _our_lines(lines: list[str]) -> list[int]:
    """The indexes of the lines mam wrote: its comment and, right after it, its `notify`, among the top-level
    lines (before the first table). The same words elsewhere (a table's own `notify`) are the user's."""
    out: list[int] = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):
            break
        if line.rstrip("\r\n") == MARK and i + 1 < len(lines) and lines[i + 1].rstrip("\r\n") in {
                notify_line(by) for by in programs()}:
            out += [i, i + 1]
    return out


def remove(text: str) -> str | None:
    data = _parse(text)
    lines = text.splitlines(keepends=True)
    ours = set(_our_lines(lines))
    rest = "".join(line for i, line in enumerate(lines) if i not in ours)
    if ours:  # what is left must be the file without mam's `notify` and nothing else (not a multi-line string's)
        data.pop("notify", None)
        if _parse(rest) != data:
            raise Unparsable("mam's lines are not where it wrote them: take its `notify` out by hand")
    return rest if rest or text == rest else None


def count(text: str) -> tuple[int, int]:
    found = _parse(text).get("notify") in [our_argv(by) for by in programs()]
    return (1 if found and _our_lines(text.splitlines(keepends=True)) else 0), 1


KIND = KindFile("codex", config, add, remove, count)


def hooks_json(env: Mapping[str, str]) -> Path:
    return config(env).with_name("hooks.json")


EVENTS: list[Event] = [
    ("SessionStart", None, "idle"),
    ("UserPromptSubmit", None, "working"),
    ("PostToolUse", None, "working"),
    ("PermissionRequest", None, "blocked"),
    ("Stop", None, "idle"),
]
# The event's label in Codex's hook-state keys (hook_event_key_label, codex-rs/hooks/src/lib.rs).
LABELS = {"SessionStart": "session_start", "UserPromptSubmit": "user_prompt_submit",
          "PostToolUse": "post_tool_use", "PermissionRequest": "permission_request", "Stop": "stop"}


def switch(settings: dict[str, Any]) -> str:
    """`on`, `off`, `default` (not set) or `invalid`: the feature Codex's lifecycle hooks run under,
    `[features] hooks` (the older key `codex_hooks` where `hooks` is not set). Codex reads `[features]` as a
    table of true or false (FeaturesToml): any other value there (`hooks = "false"`) is no default, but a
    config.toml Codex does not take."""
    features = settings.get("features", {})
    if not isinstance(features, dict):
        return "invalid"
    for key in ("hooks", "codex_hooks"):
        if key in features:
            value = features[key]
            return ("on" if value else "off") if isinstance(value, bool) else "invalid"
    return "default"


def trust(hooks_text: str, path: Path, settings: dict[str, Any]) -> tuple[int, int, int]:
    """(mam's hooks in hooks.json, those with a trusted hash recorded in config.toml, those disabled there)."""
    hooks = settings.get("hooks")
    states = hooks.get("state") if isinstance(hooks, dict) else None
    states = states if isinstance(states, dict) else {}
    names = {str(path), os.path.realpath(path)}
    by_place: dict[tuple[str, int, int], dict[str, Any]] = {}
    for key, state in states.items():
        parts = str(key).strip().rsplit(":", 3)
        if len(parts) != 4 or not isinstance(state, dict):
            continue
        source = parts[0].removeprefix("file:")
        if source in names and parts[2].isdigit() and parts[3].isdigit():
            by_place[(parts[1], int(parts[2]), int(parts[3]))] = state
    ours = [(LABELS.get(event, event), group, handler) for event, group, handler in groups_of_ours(hooks_text, EVENTS)]
    trusted = sum(1 for place in ours if isinstance(by_place.get(place, {}).get("trusted_hash"), str))
    disabled = sum(1 for place in ours if by_place.get(place, {}).get("enabled") is False)
    return len(ours), trusted, disabled


def notes(text: str | None, env: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    """What status says beside hooks.json: the feature switch and the trust, both read in config.toml."""
    toml_text = read(config(env))
    settings = _parse(toml_text) if toml_text is not None else {}
    on = switch(settings)
    details: dict[str, object] = {"feature": on, "of": 0, "trusted": 0, "disabled": 0}
    words = {"off": "; Codex's hooks are switched off in config.toml ([features] hooks = false): they do not run "
                    "(mam leaves that switch to you)",
             "on": "; Codex's hooks are switched on in config.toml ([features])",
             "default": "; config.toml does not set [features] hooks: Codex's default applies (on, in the "
                        "source mam was checked against)",
             "invalid": "; config.toml's [features] hooks (or features itself) is not true or false: Codex reads "
                        "only those there, and may refuse the file"}[on]
    if text is not None:
        count_, trusted, disabled = trust(text, hooks_json(env), settings)
        details.update({"trusted": trusted, "disabled": disabled, "of": count_})
        if count_:
            words += (f"; trust recorded in config.toml for {trusted} of mam's {count_} (the user gives it in Codex; "
                      "mam does not check the hash)")
            if disabled:
                words += f"; {disabled} disabled there"
    return words, details


HOOKS = make("codex", hooks_json, EVENTS, notes=notes, by_place=True)
