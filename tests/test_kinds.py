"""The agent-kind library and the screen classifier: the shipped rules read every stand-in agent's screens as
their state, the bottom of the screen and the ranking decide, a workspace override wins and a bad one is
refused with its line, and argv words stay data."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import Workspace
from mam.kinds.classify import UNKNOWN, Verdict, classify_screen, screen_lines
from mam.kinds.library import RULE_STATES, load_library
from mam.util.errors import EXIT_BAD_INPUT, MamError

STANDIN_PATH = Path(__file__).parent / "agents" / "standin.py"


def _standin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mam_standin", STANDIN_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


standin = _standin()
SHIPPED = load_library(None)

# What a reader of each stand-in screen must conclude, and by which rule.
EXPECTED = {
    ("claude", "working"): "claude.spinner",
    ("claude", "blocked"): "claude.permission",
    ("claude", "idle"): "claude.footer",
    ("codex", "working"): "codex.status",
    ("codex", "blocked"): "codex.confirm",
    ("codex", "idle"): "codex.composer",
    ("gemini", "working"): "gemini.loading",
    ("gemini", "blocked"): "gemini.confirm",
    ("gemini", "idle"): "gemini.input",
    ("opencode", "working"): "opencode.interrupt",
    ("opencode", "blocked"): "opencode.permission",
    ("opencode", "idle"): "opencode.input",
    ("grok", "working"): "grok.status",
    ("grok", "blocked"): "grok.permission",
    ("grok", "idle"): "grok.footer",
    ("hermes", "working"): "hermes.spinner",
    ("hermes", "blocked"): "hermes.choice",
    ("hermes", "idle"): "hermes.prompt",
    ("aider", "working"): "aider.waiting",
    ("aider", "blocked"): "aider.confirm",
    ("aider", "idle"): "aider.prompt",
    ("cursor", "working"): "cursor.working",
    ("cursor", "blocked"): "cursor.approval",
    ("cursor", "idle"): "cursor.followup",
    ("generic", "blocked"): "generic.yes_no",
}
BOX = "─" * 60


def test_the_shipped_file_reads_the_same_through_the_refusing_loader() -> None:
    """The shipped file is read with libyaml's loader for speed; a user's file goes through the loader that
    refuses anchors, duplicate keys and the like. The shipped one must pass that too, to the same kinds."""
    from mam.kinds import library as kinds_library

    path = kinds_library._shipped_path()
    strict = kinds_library._load_file(path, path.read_text(encoding="utf-8"), {})
    assert strict == kinds_library._shipped()


def test_the_json_twin_is_made_from_the_shipped_yaml_as_it_is_now() -> None:
    """agents.json stands in for agents.yaml only while it was made from that exact text; after an edit of
    agents.yaml, `python3 -m mam.kinds` writes it again (this test fails until then)."""
    from mam.kinds import library as kinds_library

    yaml_text = kinds_library._shipped_path().read_text(encoding="utf-8")
    assert kinds_library._twin_path().read_text(encoding="utf-8") == kinds_library.twin_text(yaml_text), \
        "agents.json is stale: run `python3 -m mam.kinds`"
    assert kinds_library._twin_document(yaml_text) is not None


@pytest.mark.parametrize("twin", ["stale", "missing", "garbage"])
def test_without_a_current_twin_the_yaml_is_what_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         twin: str) -> None:
    """An agents.yaml edited in place (or a twin lost or broken) is read as YAML: the twin never wins over it."""
    from mam.kinds import library as kinds_library

    shipped = kinds_library._shipped_path().read_text(encoding="utf-8")
    yaml_file, json_file = tmp_path / "agents.yaml", tmp_path / "agents.json"
    json_file.write_text(kinds_library.twin_text(shipped))  # made from the text before the edit
    edited = shipped.replace("kinds:\n", "kinds:\n  edited:\n    programs: [edited-agent]\n", 1)
    assert edited != shipped
    yaml_file.write_text(edited)
    if twin == "missing":
        json_file.unlink()
    elif twin == "garbage":
        json_file.write_text("{not json")
    monkeypatch.setattr(kinds_library, "_shipped_path", lambda: yaml_file)
    monkeypatch.setattr(kinds_library, "_twin_path", lambda: json_file)
    # Unwrapped: the process's cached library stays the one every other test uses.
    assert kinds_library._shipped.__wrapped__()["edited"].programs == ("edited-agent",)


def test_every_shipped_kind_with_a_program_can_be_spawned_by_its_name() -> None:
    """`mam spawn --agent KIND` runs a kind's own program: every kind the library reads screens for is one."""
    from mam.kinds.library import agent_programs

    AGENT_COMMANDS = agent_programs()

    for name, kind in SHIPPED.kinds.items():
        if kind.programs:
            assert AGENT_COMMANDS.get(name, ("?",))[0] in kind.programs, name


def test_the_shipped_file_loads_and_every_rule_compiles_with_a_window() -> None:
    assert {"generic", "claude", "codex", "gemini", "opencode", "grok", "hermes", "aider"} <= set(SHIPPED.kinds)
    ids = [rule.id for kind in SHIPPED.kinds.values() for rule in kind.rules]
    assert len(ids) == len(set(ids))
    for kind in SHIPPED.kinds.values():
        for rule in kind.rules:
            assert rule.id.startswith(kind.name + ".")
            assert rule.state in RULE_STATES and 1 <= rule.lines <= 200
            assert rule.regex.search("") is None


def test_every_stand_in_screen_is_covered() -> None:
    drawn = {(kind, state) for kind in standin.KINDS for state in standin.drawn(kind) if state != "garbage"}
    assert drawn == set(EXPECTED)


@pytest.mark.parametrize(("kind", "state"), sorted(EXPECTED))
def test_a_stand_in_screen_reads_as_its_state(kind: str, state: str) -> None:
    for frame in range(8):  # every spinner frame, not only the first
        verdict = classify_screen(SHIPPED, kind, standin.screen(kind, state, frame))
        assert (verdict.state, verdict.rule) == (state, EXPECTED[kind, state]), frame
        assert verdict.line and "\x1b" not in verdict.line


@pytest.mark.parametrize("kind", [*sorted(standin.KINDS), "no-such-agent", None])
def test_a_screen_no_rule_knows_is_unknown(kind: str | None) -> None:
    assert classify_screen(SHIPPED, kind, standin.screen("claude", "garbage")) == UNKNOWN
    assert classify_screen(SHIPPED, kind, "") == UNKNOWN
    assert classify_screen(SHIPPED, kind, "\n\n   \n\x1b[0m\n") == UNKNOWN


def test_an_unknown_kind_is_read_with_the_generic_rules_only() -> None:
    assert classify_screen(SHIPPED, "no-such-agent", "Continue? [y/N]\n").rule == "generic.yes_no"
    assert classify_screen(SHIPPED, None, "Do you want to proceed?\n").rule == "generic.proceed"
    # A Claude idle box means nothing for an agent mam does not know.
    assert classify_screen(SHIPPED, None, standin.screen("claude", "idle")) == UNKNOWN


def test_blocked_outranks_working_outranks_idle() -> None:
    # Claude keeps its spinner and footer hint drawn under a permission question.
    screen = ("Do you want to make this edit to queue.py?\n ❯ 1. Yes\n   2. No (esc)\n"
              "✶ Pondering… (12s)\n" + BOX + "\n❯\n" + BOX + "\n  esc to interrupt\n")
    assert classify_screen(SHIPPED, "claude", screen).state == "blocked"
    # Codex questions carry "esc to interrupt" in their own footer.
    question = ("Question 1/3 (3 unanswered)\n› 1. Keep the queue\n"
                "tab to add notes | enter to submit answer | ←/→ to navigate questions | esc to interrupt\n")
    assert classify_screen(SHIPPED, "codex", question).rule == "codex.confirm"
    # The input box is drawn while Claude works: it is not idle.
    working = "✳ Cooking… (3s)\n" + BOX + "\n❯\n" + BOX + "\n  ? for shortcuts\n"
    assert classify_screen(SHIPPED, "claude", working).state == "working"


def test_claude_spinner_is_matched_by_shape_not_words() -> None:
    for line in ("✳ Zigzagging… (2m 53s · ↓ 10.8k tokens)", "● Thundering…", "* Choreographing… (3m 19s",
                 "✽ Wandering… (esc to interrupt)"):
        verdict = classify_screen(SHIPPED, "claude", line + "\n" + BOX + "\n❯\n" + BOX + "\n")
        assert verdict.state == "working", line
    # Past tense, no ellipsis: the turn is over.
    assert classify_screen(SHIPPED, "claude", "✻ Worked for 7s\n").rule == "claude.turn_over"


def test_only_the_bottom_of_the_screen_counts() -> None:
    stale = ["Do you want to proceed?", "• Working (3s • esc to interrupt)", *[f"line {i}" for i in range(30)]]
    claude = "\n".join([*stale, BOX, "❯", BOX, "  ? for shortcuts"])
    assert classify_screen(SHIPPED, "claude", claude).state == "idle"
    codex = "\n".join([*stale, "─ Worked for 5s ─", "› Ask Codex", "  gpt-5 default · /w"])
    assert classify_screen(SHIPPED, "codex", codex).state == "idle"
    # Trailing blank rows (a tall pane) do not push the bottom away.
    assert classify_screen(SHIPPED, "claude", claude + "\n" * 80).state == "idle"


def test_escapes_and_carriage_returns_are_resolved_before_matching() -> None:
    split = "\x1b[2m  esc to \x1b[1;31minterrupt\x1b[0m\n"
    assert classify_screen(SHIPPED, "claude", split).rule == "claude.interrupt"
    # An old "working" frame overwritten in place by the idle prompt is gone.
    assert classify_screen(SHIPPED, "hermes", "◜ (x) pondering... (1.2s)\r\x1b[2K❯\n").rule == "hermes.prompt"
    assert screen_lines("abcdef\rxy\nab\bc\n\x1b]0;title\x07t\x1b[?25lz\nold text\r\x1b[Knew\n\n\n") == [
        "xycdef", "ac", "tz", "new"]


def test_the_quoted_line_is_cut_and_cannot_reprogram_a_terminal() -> None:
    hostile = "Do you want to proceed? \u202e\x07\x1b]52;c;ZXZpbA==\x07" + "x" * 500 + "\x9b31m\n"
    verdict = classify_screen(SHIPPED, "claude", hostile)
    assert verdict.state == "blocked" and verdict.line is not None
    assert len(verdict.line) <= 200
    assert all(ch.isprintable() for ch in verdict.line)
    assert "\u202e" not in verdict.line and "52;c" not in verdict.line
    assert verdict.as_json() == {"rule": "claude.permission", "line": verdict.line}
    assert Verdict("unknown", None, None).as_json() == {"rule": None, "line": None}


# -- the workspace override ----------------------------------------------------------------------------------

def _override(tmp_path: Path, text: str) -> Path:
    path = tmp_path / ".mam" / "states.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_a_user_rule_is_tried_before_the_shipped_ones(tmp_path: Path) -> None:
    path = _override(tmp_path, """\
schema: 1
kinds:
  claude:
    rules:
      - id: claude.my_footer
        state: idle
        pattern: '\\? for shortcuts'
        lines: 3
""")
    library = load_library(path)
    assert classify_screen(library, "claude", standin.screen("claude", "idle")).rule == "claude.my_footer"
    assert classify_screen(SHIPPED, "claude", standin.screen("claude", "idle")).rule == "claude.footer"
    # Everything else is still shipped.
    assert classify_screen(library, "claude", standin.screen("claude", "working")).rule == "claude.spinner"
    assert library.kinds["claude"].programs == ("claude",)


def test_a_user_rule_with_a_shipped_id_replaces_it(tmp_path: Path) -> None:
    path = _override(tmp_path, """\
schema: 1
kinds:
  claude:
    rules:
      - id: claude.spinner
        state: working
        pattern: 'never drawn by anything'
        lines: 5
""")
    library = load_library(path)
    assert [r.id for r in library.kinds["claude"].rules] == [r.id for r in SHIPPED.kinds["claude"].rules]
    assert classify_screen(library, "claude", standin.screen("claude", "working")).rule == "claude.interrupt"


def test_a_user_kind_and_replaced_programs_resume_and_session_options(tmp_path: Path) -> None:
    path = _override(tmp_path, """\
schema: 1
kinds:
  mybot:
    programs: [mybot, mybot-dev]
    session_options: [--chat]
    resume: ["--chat", "{session}", "{args}"]
    rules:
      - id: mybot.busy
        state: working
        pattern: '^thinking\\b'
        lines: 2
  claude:
    programs: [claude-wrapped]
    resume: ["--continue-session", "{session}"]
""")
    library = load_library(path)
    assert library.kind_for(["mybot-dev", "--chat", "c1"]) == "mybot"
    assert library.session_from_args("mybot", ["--chat", "c1"]) == "c1"
    assert library.resume_argv("mybot", "mybot", ["--chat", "c1", "-v"], "c2") == ["mybot", "--chat", "c2", "-v"]
    assert classify_screen(library, "mybot", "Thinking hard\n").rule == "mybot.busy"
    assert library.kind_for(["claude"]) is None and library.kind_for(["claude-wrapped"]) == "claude"
    assert library.resume_argv("claude", "claude", ["-p"], "s") == ["claude", "--continue-session", "s"]
    assert library.kinds["claude"].session_options == SHIPPED.kinds["claude"].session_options


def test_no_user_file_is_the_shipped_library(tmp_path: Path) -> None:
    library = load_library(tmp_path / ".mam" / "states.yaml")
    assert library.kinds == SHIPPED.kinds
    assert load_library(None).kinds["claude"] is SHIPPED.kinds["claude"]  # parsed once per process


RULE_OK = "      - id: claude.x\n        state: idle\n        pattern: 'x'\n        lines: 3\n"
HEAD = "schema: 1\nkinds:\n  claude:\n    rules:\n"


@pytest.mark.parametrize(("text", "line", "says"), [
    (HEAD + RULE_OK.replace("lines: 3", "lines: 3\n        line: 3"), 9, "unknown key 'line'"),
    (HEAD + RULE_OK.replace("idle", "done"), 6, "state must be blocked, working, idle"),
    (HEAD + RULE_OK.replace("idle", "sleepy"), 6, "got 'sleepy'"),
    (HEAD + RULE_OK + RULE_OK, 9, "duplicate rule id claude.x"),
    (HEAD + RULE_OK.replace("'x'", "'(unclosed'"), 7, "does not compile"),
    (HEAD + RULE_OK.replace("'x'", "'x*'"), 7, "matches an empty line"),
    (HEAD + RULE_OK.replace("lines: 3", "lines: 0"), 8, "from 1 to 200"),
    (HEAD + RULE_OK.replace("lines: 3", "lines: 201"), 8, "from 1 to 200"),
    (HEAD + RULE_OK.replace("lines: 3", "lines: true"), 8, "from 1 to 200"),
    (HEAD + RULE_OK.replace("claude.x", "codex.x"), 5, "must be claude.NAME"),
    (HEAD + RULE_OK.replace("        lines: 3\n", ""), 5, "missing lines"),
    ("schema: 1\nkinds:\n  claude:\n    program: [claude]\n", 4, "unknown key 'program'"),
    ("schema: 1\nkinds:\n  claude:\n    resume: ['{args}']\n", 4, "{session} once"),
    ("schema: 1\nkinds:\n  claude:\n    resume: ['--x={session}']\n", 4, "placeholders"),
    ("schema: 1\nkinds:\n  claude:\n    programs: [/usr/bin/claude]\n", 4, "program basenames"),
    ("schema: 1\nkinds:\n  claude:\n    session_options: ['x; rm']\n", 4, "options such as"),
    ("schema: 1\nkinds:\n  Bad Name:\n    programs: []\n", 3, "kind name"),
    ("schema: 2\nkinds: {}\n", 1, "schema must be 1"),
    ("schema: 1\nkinds: {}\nextra: 1\n", 3, "unknown key 'extra'"),
    ("schema: 1\nkinds: {}\nspawn_only:\n  mine: mine\n", 3, "unknown key 'spawn_only'"),  # shipped only
    ("schema: 1\nkinds:\n  a: &x {programs: [a]}\n  b: *x\n", 3, "anchors and aliases"),
    ("schema: 1\nkinds:\n  a: {}\n  a: {}\n", 4, "duplicate key 'a'"),
    ("schema: 1\nkinds: [\n", 3, "not valid YAML"),
    ("schema: 1\nkinds:\n  claude:\n    programs: [claude]\n  codex\n  gemini: {}\n", 5, "not valid YAML"),
])
def test_a_bad_override_is_refused_with_its_file_and_line(tmp_path: Path, text: str, line: int, says: str) -> None:
    path = _override(tmp_path, text)
    with pytest.raises(MamError) as caught:
        load_library(path)
    assert caught.value.code == "invalid_config" and caught.value.exit_code == EXIT_BAD_INPUT
    assert caught.value.message.startswith(f"{path}:{line}: "), caught.value.message
    assert says in caught.value.message
    assert "\n" not in caught.value.message
    assert path.read_text() == text  # nothing rewritten


def test_an_override_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ".mam" / "states.yaml"
    path.mkdir(parents=True)
    with pytest.raises(MamError, match="not a regular file") as caught:
        load_library(path)
    assert caught.value.code == "invalid_config"


# -- argv ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "kind"), [
    (["claude"], "claude"),
    (["/opt/bin/codex", "--model", "o3"], "codex"),
    (["env", "-u", "CLAUDECODE", "-i", "A=1", "B=x=y", "--", "claude", "--resume", "s"], "claude"),
    (["/usr/bin/env", "gemini"], "gemini"),
    (["npx", "-y", "@openai/codex@0.5.1"], "codex"),
    (["node", "/usr/lib/node_modules/x/bin/opencode.js", "run"], "opencode"),
    (["python3", "-m", "aider.main", "--model", "x"], "aider"),
    (["python3.12", "-u", "/home/u/.local/bin/hermes"], "hermes"),
    (["env", "A=1", "npx", "grok"], "grok"),
    (["bash", "-c", "claude"], None),
    (["claude-code"], None),
    (["env", "A=1"], None),
    (["npx"], None),
    (["python3", "-m"], None),
    ([], None),
])
def test_kind_for_reads_the_program_through_env_and_launchers(argv: list[str], kind: str | None) -> None:
    assert SHIPPED.kind_for(argv) == kind


@pytest.mark.parametrize(("kind", "args", "session"), [
    ("claude", ["--session-id", "abc-1"], "abc-1"),
    ("claude", ["--model", "opus", "--resume=xyz"], "xyz"),
    ("claude", ["--resume", "a", "--resume", "b"], "b"),
    ("claude", ["--resume"], None),  # the picker: no id given
    ("claude", ["--resume", "--model", "opus"], None),
    ("claude", ["--", "--session-id", "x"], None),  # after --, words are the prompt
    ("claude", ["--session-id", "$(rm -rf ~); `id` #{pane_id}"], "$(rm -rf ~); `id` #{pane_id}"),
    ("codex", ["--session-id", "abc"], None),  # codex has no session option
    ("opencode", ["-s", "ses_1"], "ses_1"),
    ("no-such-agent", ["--session-id", "abc"], None),
])
def test_session_from_args(kind: str, args: list[str], session: str | None) -> None:
    assert SHIPPED.session_from_args(kind, args) == session


def test_resume_argv_keeps_every_word_as_data() -> None:
    hostile = ["--model", "opus", "--session-id", "old", "$(touch /tmp/x); #{pane_id}", "a b"]
    argv = SHIPPED.resume_argv("claude", "/opt/claude", hostile, "new-1")
    assert argv == ["/opt/claude", "--model", "opus", "$(touch /tmp/x); #{pane_id}", "a b", "--resume", "new-1"]
    assert SHIPPED.resume_argv("claude", "claude", ["--resume=old", "--resume"], "s") == ["claude", "--resume", "s"]
    assert SHIPPED.resume_argv("codex", "codex", ["--model", "o3"], "s1") == ["codex", "resume", "s1", "--model", "o3"]
    # What follows -- stays positional, after the resume options.
    assert SHIPPED.resume_argv("claude", "claude", ["-v", "--", "fix it"], "s") == [
        "claude", "-v", "--resume", "s", "--", "fix it"]
    assert SHIPPED.resume_argv("gemini", "gemini", [], "s") is None
    assert SHIPPED.resume_argv("no-such-agent", "x", [], "s") is None


@pytest.mark.parametrize("session", ["", "--dangerously-skip-permissions", "a b", "a\nb", "x\x1b[2J"])
def test_resume_argv_refuses_a_session_id_the_agent_would_misread(session: str) -> None:
    with pytest.raises(MamError) as caught:
        SHIPPED.resume_argv("claude", "claude", [], session)
    assert caught.value.code == "invalid_name" and "\n" not in caught.value.message
    assert "\x1b" not in caught.value.message


def test_the_how_to_in_docs_states_md_works(tmp_path: Path) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "states.md").read_text()
    blocks = [block.split("```", 1)[0] for block in doc.split("```yaml\n")[1:]]
    assert len(blocks) == 3
    library = load_library(_override(tmp_path, blocks[1]))
    assert classify_screen(library, "mybot", "hello\n⠋ thinking (3s)\nmybot> \n").rule == "mybot.spinner"
    assert classify_screen(library, "mybot", "Delete x? Allow? (yes/no)\n").rule == "mybot.ask"
    assert classify_screen(library, "mybot", "done\nmybot> \n").rule == "mybot.prompt"
    assert library.resume_argv("mybot", "mybot", ["--chat", "a", "-q"], "b") == ["mybot", "--chat", "b", "-q"]
    changed = load_library(_override(tmp_path, blocks[2]))
    assert {r.id: r.lines for r in changed.kinds["claude"].rules}["claude.spinner"] == 14
    load_library(_override(tmp_path, blocks[0]))  # the format example is a valid file too


# Screens as the agents draw them, one or more per shipped rule: every rule is matched by what it is for.
CLAUDE_BOX = BOX + "\n❯\n" + BOX + "\n"
SAMPLES: dict[str, list[str]] = {
    "generic.proceed": ["Delete 3 files.\nDo you want to proceed?\n"],
    "generic.yes_no": ["Continue? [Y/n] \n", "Really? (y/n): \n", "Overwrite? (Y)es/(N)o [Yes]:\n"],
    "generic.press_enter": ["Installed.\nPress Enter to continue...\n"],
    "generic.prompt": ["Python 3.11.7\n>>> \n", "me@box:~/repo$ \n", "root@box:/# \n", "sqlite> \n", "❯ \n",
                       "irb(main):001:0> \n", "% \n"],
    "claude.permission": [" Do you want to make this edit to queue.py?\n ❯ 1. Yes\n   2. No\n",
                          " Do you want to create notes.md?\n ❯ 1. Yes\n",
                          "Do you want to allow this connection?\n ❯ 1. Yes\n"],
    "claude.plan": ["Would you like to proceed?\n ❯ 1. Yes\n", "Ready to submit your answers?\n❯ 1. Submit answers\n",
                    "Review your answers\n ● Which queue?\n"],
    "claude.menu": ["Claude in Chrome wants to navigate on example.com\n❯ 1. Allow\n"
                    "  2. Allow all actions on example.com for this session\n  3. Deny (esc)\n"],
    "claude.form": ["Pick one\n  1. a\n  2. b\nEnter to select · ↑/↓ to navigate · Esc to cancel\n",
                    "  Esc to cancel · Tab to amend · ctrl+e to explain\n"],
    "claude.trust": ["Do you trust the files in this folder?\n\n /work/repo\n",
                     "Waiting for permission\n", "Run a dynamic workflow?\n"],
    "claude.spinner": ["✳ Simplifying recompute_tangents… (2m 18s · ↓ 4.8k tokens)\n" + CLAUDE_BOX],
    "claude.interrupt": ["Googling. (ctrl+c to interrupt\n" + CLAUDE_BOX,
                         CLAUDE_BOX + "  esc to interrupt · ctrl+t to hide tasks · ↓ to manage\n"],
    "claude.background": ["✻ Crunched for 7s · 1 shell still running\n" + CLAUDE_BOX,
                          "Waiting for 2 background agents to finish\n" + CLAUDE_BOX],
    "claude.footer": [CLAUDE_BOX + "  ⏵⏵ accept edits on (shift+tab to cycle)\n"],
    "claude.input": [CLAUDE_BOX],
    "claude.turn_over": ["⎿  Interrupted · What should Claude do instead?\n", "✻ Worked for 1m 52s\n"],
    "codex.confirm": ["› 1. Yes, continue\n  2. No, quit\n\n  Press enter to continue\n",
                      "› 1. Allow\n  4. Cancel\n enter to submit | esc to cancel\n"],
    "codex.question": ['Allow the chrome-devtools MCP server to run tool "new_page"?\n› 1. Allow\n',
                       "Would you like to make the following edits?\n\n  queue.py (+3 -1)\n",
                       "> You are in /work\nDo you trust the contents of this directory?\n› 1. Yes, continue\n"],
    "codex.allow_old": ["Allow command?\n  $ ls\n", "Run it? [y/n]\n"],
    "codex.status": ["◦ Fixing bug in queue region (3m 22s • esc to interrupt)\n\n› Ask\n",
                     "• Working (2m 10s)\n\n› Ask\n"],
    "codex.interrupt": ["Running tests esc to interrupt\n› \n"],
    "codex.composer": ["▌ Find and fix a bug in @filename\n⏎ send ⇧⏎ newline ⌃T transcript ⌃C quit\n"],
    "codex.turn_over": ["■ Conversation interrupted - tell the model what to do differently\n",
                        "<< Code review finished >>\n", "─ Worked for 1m 52s ──────\n"],
    "gemini.confirm": ["│ Apply this change?\n│ ● 1. Allow once\n", "│ Do you want to proceed?\n"],
    "gemini.options": ["● Yes, allow once\n○ Yes, always allow tool\n○ No (esc)\n",
                       "⠏ Waiting for user confirmation\n"],
    "gemini.loading": ["⠼ Counting electrons\n(esc to cancel, 12s)\n"],
    "gemini.input": ["│ >   Type your shell command │\n", "Press 'i' for INSERT mode.\n"],
    "opencode.permission": ["Permission Required\n Allow (a) Deny (d)\n"],
    "opencode.question": ["┃ Which?\n  ↑↓ select  enter submit  esc dismiss\n"],
    "opencode.interrupt": ["  ⬝⬝⬝⬝⬝■■■  esc again to interrupt\n"],
    "opencode.input": ["> \npress enter to send\n"],
    "grok.permission": ["◆ Choose\n  Esc:unselect │ Tab:scrollback │ Shift+x:dismiss\n",
                        "  Yes, proceed   No, reject\n  ←/→:scope\n"],
    "grok.options": ["◆ Run ls\n┃  2 (○) Yes, proceed\n┃  z (○) Type your answer here\n"],
    "grok.status": ["⠋ Waiting… 1.8s\n  Ctrl+c:cancel  Ctrl+Enter:interject\n"],
    "grok.footer": ["╰────╯\n  Ctrl+.:shortcuts\n"],
    "hermes.choice": ["⚠️  DANGEROUS COMMAND: rm -rf /tmp\n\n  [o]nce  |  [d]eny\n\n  Choice [o/s/a/D]: \n"],
    "hermes.approval": ["Allow once\nAllow for this session\n"],
    "hermes.spinner": ["◠ (⊙_⊙) contemplating... (2.4s)\n"],
    "hermes.interrupt": ["┊ 💻 terminal 'ls -la' (0.3s)\n msg=interrupt\n"],
    "hermes.prompt": ["⚡\n"],
    "aider.confirm": ["Create new file? (Y)es/(N)o [Yes]: \n",
                      "Allow edits to file that has not been added to the chat? (Y)es/(N)o [No]:\n"],
    "aider.waiting": ["> fix it\nWaiting for gpt-5\n"],
    "aider.prompt": ["ask> \n", "architect> \n", "> \n"],
    "cursor.approval": ["  Write to this file?\n  → Proceed (y)\n", "Waiting for approval...\n"],
    "cursor.working": ["⬢ Grepping..\n"],
    "cursor.followup": ["→ Add a follow-up\n"],
}


def test_every_shipped_rule_has_samples() -> None:
    assert set(SAMPLES) == {rule.id for kind in SHIPPED.kinds.values() for rule in kind.rules}


@pytest.mark.parametrize("rule", sorted(SAMPLES))
def test_a_shipped_rule_matches_what_its_agent_draws(rule: str) -> None:
    kind = rule.split(".")[0]
    for screen in SAMPLES[rule]:
        assert classify_screen(SHIPPED, kind, screen).rule == rule, screen


def test_near_misses_are_not_read_as_states() -> None:
    # Aider's notification is not a model call; a line merely mentioning a prompt is not one.
    assert classify_screen(SHIPPED, "aider", "Aider is waiting for your input\n").state != "working"
    assert classify_screen(SHIPPED, "aider", "We added (Y)es/(N)o prompts to the docs.\n") == UNKNOWN
    # An OpenCode header mid-turn is not idle evidence; a Codex dev server alone is not working.
    assert classify_screen(SHIPPED, "opencode", "▣  Build · GPT-5 Mini\n") == UNKNOWN
    server = "1 background terminal running · /ps to view · /stop to close\n"
    assert classify_screen(SHIPPED, "codex", server) == UNKNOWN
    # Claude's transcript viewer is neither idle nor working.
    assert classify_screen(SHIPPED, "claude", "Showing detailed transcript · ctrl+o to toggle\n") == UNKNOWN


def test_mam_kinds_lists_each_kind_its_programs_and_how_it_is_resumed(ws: Workspace) -> None:
    """A new user could not find which agents mam knows, by which program, nor which of them restore resumes."""
    proc = ws.mam("kinds", env={**ws.env, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["KIND", "PROGRAMS", "RULES", "RESUME", "NEW", "SESSION"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "claude {args} --resume {session}" in rows["claude"] and "--session-id {session}" in rows["claude"]
    assert rows["aider"].split()[1:] == ["aider", "3", "-", "-"]  # restore starts it afresh
    assert {"claude", "codex", "gemini", "generic", "opencode"} <= set(rows)
    narrow = ws.mam("kinds", env={**ws.env, "COLUMNS": "80"}).stdout.splitlines()
    assert all(len(line) <= 80 for line in narrow), narrow
    assert narrow[-1] == "(NEW SESSION left out to fit the terminal: `mam kinds --json` has it)"
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "states.yaml").write_text("schema: 1\nkinds:\n  claude:\n    programs: [claude, cc]\n")
    proc = ws.mam("kinds", env={**ws.env, "COLUMNS": "200"})
    assert "claude, cc" in proc.stdout and proc.stdout.splitlines()[-1].endswith("laid over the shipped kinds")
    (ws.root / ".mam" / "states.yaml").write_text("schema: 1\nkinds:\n  claude:\n    program: [cc]\n")
    proc = ws.mam("kinds")
    assert proc.returncode == 2 and "states.yaml:4: " in proc.stderr, proc.stderr
