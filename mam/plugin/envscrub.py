"""Which variables a server must not inherit, and why (docs/config.md).

A server hands its environment to every pane it ever spawns, so a bootstrap started from inside an agent's
shell would leak that agent's per-session markers into every later pane. The rules here are data: each
removal can be traced to the rule and the plugin (or config file) that asked for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mam.plugin.records import ScrubRule

DEFAULT_SOURCE = "mam defaults"

# Agent kinds whose name in AGENT / AI_AGENT marks the variable as a runtime marker.
KNOWN_AGENTS = frozenset({
    "1", "claude", "claude-code", "codex", "gemini", "qwen", "qwen-code", "antigravity", "agy", "opencode",
    "cursor", "cursor-agent", "grok", "hermes", "copilot", "pi", "crush", "goose", "amp", "cline", "devin",
    "droid", "kimi", "kiro", "kilo",
})

_DEFAULT_MARKERS = (
    # Claude Code
    "CLAUDECODE", "CLAUDE_CODE_CHILD_SESSION", "CLAUDE_CODE_SESSION_ID", "CLAUDE_CODE_MESSAGING_SOCKET",
    "CLAUDE_CODE_MESSAGING_TOKEN", "CLAUDE_PID", "CLAUDE_EFFORT", "CLAUDE_CODE_EXECPATH",
    "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT", "ENABLE_IDE_INTEGRATION", "CLAUDE_CODE_REMOTE*",
    "CLAUDE_CODE_CONTAINER_ID", "CLAUDE_CODE_WORKER_EPOCH", "CLAUDE_SESSION_INGRESS_TOKEN",
    # Codex CLI
    "CODEX_THREAD_ID", "CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED", "CODEX_PERMISSION_PROFILE",
    "CODEX_TOOL_CALL_ID",
    # Gemini CLI, Qwen Code
    "GEMINI_CLI", "GEMINI_SANDBOX", "QWEN_CODE", "QWEN_CODE_SESSION_ID",
    # Antigravity
    "ANTIGRAVITY_AGENT", "ANTIGRAVITY_CONVERSATION_ID",
    # OpenCode
    "OPENCODE", "OPENCODE_PID", "OPENCODE_TERMINAL", "OPENCODE_SESSION_ID", "OPENCODE_MESSAGE_ID",
    # Cursor agent
    "CURSOR_AGENT", "CURSOR_INVOKED_AS", "CURSOR_TRACE_ID",
    # Grok, Hermes
    "GROK_SESSION_ID", "GROK_HOOK_EVENT", "HERMES_SESSION_ID", "HERMES_SESSION_*",
    # Copilot, Pi, Crush, Goose
    "COPILOT_CLI", "PI_CODING_AGENT", "CRUSH", "GOOSE_TERMINAL",
    # Multiplexers' own markers are not listed here: each backend declares them once, in BackendSpec.markers, and
    # the core turns every declared backend's markers into rules (Plugins.scrub_rules).
    # host terminals
    "ITERM_SESSION_ID", "TERM_SESSION_ID", "KITTY_WINDOW_ID", "KITTY_PID", "KITTY_LISTEN_ON", "WEZTERM_PANE",
    "WEZTERM_UNIX_SOCKET", "WT_SESSION", "VSCODE_PID", "ALACRITTY_WINDOW_ID",
)

# New Claude Code markers keep appearing: any CLAUDE_CODE_* not kept below is one. It catches configuration too
# (CLAUDE_CODE_MAX_OUTPUT_TOKENS), which is why a workspace may keep a variable it matches by naming it in full.
CLASS_RULE = ScrubRule("CLAUDE_CODE_*", DEFAULT_SOURCE + " (class rule)")

DEFAULT_RULES: tuple[ScrubRule, ...] = (
    *(ScrubRule(name, DEFAULT_SOURCE) for name in _DEFAULT_MARKERS),
    ScrubRule("AGENT", DEFAULT_SOURCE, KNOWN_AGENTS),
    ScrubRule("AI_AGENT", DEFAULT_SOURCE, KNOWN_AGENTS),
    CLASS_RULE,
)

# Removed before any rule is consulted, so no keep rule (`MAM_*`, `*`) brings it back: a shim's guard names the
# process of one call (mam.commands.passthrough), and a server or agent inheriting it would carry it for life.
ALWAYS_REMOVED = ScrubRule("MAM_SHIM_GUARD", DEFAULT_SOURCE + " (a shim's guard: never kept)")

DEFAULT_KEEP: tuple[str, ...] = (
    "CLAUDE_CONFIG_DIR", "CLAUDE_PROJECT_DIR", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_EFFORT_LEVEL", "CLAUDE_CODE_FORCE_SESSION_PERSISTENCE",
    "ANTHROPIC_*", "OPENAI_API_KEY", "CODEX_HOME", "GROK_HOME", "HERMES_HOME", "HERMES_PROFILE",
    "HERMES_CONFIG", "WORKSPACE_ROOT", "MAM_*", "HOME", "PATH", "SHELL", "USER", "LOGNAME", "LANG", "LC_*",
    "TERM", "TMPDIR", "XDG_*",
)


def matches(pattern: str, name: str) -> bool:
    """`NAME` matches exactly; `PREFIX_*` matches every name that starts with `PREFIX_`."""
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


@dataclass(frozen=True)
class KeepRule:
    pattern: str
    source: str
    # From a workspace's .mam/config.yaml, a file anyone can commit: it keeps only what `may_keep` allows.
    workspace: bool = False


def may_keep(keep: KeepRule, rule: ScrubRule, name: str) -> bool:
    """Whether `keep` may win over the scrub `rule` for the variable `name`. mam's defaults and the user's own
    config (outside every workspace) win over every rule. A workspace's keep keeps configuration, never a marker
    the scrub exists for: it wins over the workspace's own scrub rules, and over the class rule (CLAUDE_CODE_*)
    for a variable it names in full; never over a marker of mam's, of a backend, or of the user's own config."""
    if not keep.workspace:
        return True
    if rule.source == keep.source:
        return True
    return rule == CLASS_RULE and not keep.pattern.endswith("*") and keep.pattern == name


@dataclass(frozen=True)
class Decision:
    """One variable that a scrub rule matched: removed, or kept because a keep rule wins."""

    name: str
    rule: ScrubRule
    kept_by: KeepRule | None
    # A workspace keep rule that matched the name but may not keep it (may_keep): it is removed all the same.
    refused_keep: KeepRule | None = None

    @property
    def removed(self) -> bool:
        return self.kept_by is None


@dataclass(frozen=True)
class ScrubPlan:
    decisions: tuple[Decision, ...]
    env: dict[str, str]  # the environment a server gets

    @property
    def removed(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.removed)

    @property
    def kept(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.removed)


def keep_rules(config_keep: Iterable[str], config_source: str, user_keep: Iterable[str] = (),
               user_source: str = "", workspace: bool = True) -> tuple[KeepRule, ...]:
    """The keep rules in the order they are tried: the user's own config, the workspace's (`config_keep`, a
    workspace's unless `workspace` is False), then mam's defaults."""
    return (*(KeepRule(p, user_source) for p in user_keep),
            *(KeepRule(p, config_source, workspace) for p in config_keep),
            *(KeepRule(p, DEFAULT_SOURCE) for p in DEFAULT_KEEP))


def plan(env: Mapping[str, str], rules: Iterable[ScrubRule], keep: Iterable[KeepRule]) -> ScrubPlan:
    """Decide every variable of `env`. Keep rules win over scrub rules (except ALWAYS_REMOVED, and a workspace's
    keep over what `may_keep` refuses it); the first matching rule is named."""
    rules = tuple(rules)
    keep = tuple(keep)
    decisions: list[Decision] = []
    out: dict[str, str] = {}
    for name in sorted(env):
        value = env[name]
        if name == ALWAYS_REMOVED.pattern:
            decisions.append(Decision(name, ALWAYS_REMOVED, None))
            continue
        matched = [r for r in rules if matches(r.pattern, name) and (r.values is None or value in r.values)]
        if not matched:
            out[name] = value
            continue
        keeping = [k for k in keep if matches(k.pattern, name)]
        kept_by = next((k for k in keeping if all(may_keep(k, r, name) for r in matched)), None)
        refused = next((k for k in keeping if k.workspace), None) if kept_by is None else None
        # A refused keep names the rule it may not win over: that is why the variable goes.
        rule = next((r for r in matched if not may_keep(refused, r, name)), matched[0]) if refused else matched[0]
        decisions.append(Decision(name, rule, kept_by, refused))
        if kept_by is not None:
            out[name] = value
    return ScrubPlan(tuple(decisions), out)
