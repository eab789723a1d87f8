"""The screen corpus: tests/screens/KIND/STATE-CASE.txt is a screen an agent of KIND draws (from docs/states.md and
what each agent was seen to draw), and STATE is what mam must read on it. Every rule runs over every screen of
its kind: read as text, with and without a cursor, and shown in real tmux panes and the fake zellij's panes. The
answered question (a line-mode question answered, the program printing on to its prompt) is in it, and its
flow runs end to end: spawn, blocked, `mam send y --enter`, no longer blocked."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Tmux, Workspace, ZellijKit
from mam.agents.agentstate import PROMPT_QUIET, PROMPT_RULE, read_capture
from mam.kinds.classify import classify_screen, cursor_block, screen_lines
from mam.kinds.library import load_library
from mam.plugin.records import Agent, CallContext, PaneCapture
from mam_tmux.backend import TmuxBackend
from mam_zellij.backend import ZellijBackend

CORPUS = Path(__file__).parent / "screens"
STANDIN = str(Path(__file__).parent / "agents" / "standin.py")
SHIPPED = load_library(None)
STATES = ("working", "blocked", "idle", "unknown")
# Shows a corpus file as the agent drew it, the cursor after its last character, and stays.
SHOW = "import sys, time; sys.stdout.write(open(sys.argv[1]).read().rstrip('\\n')); sys.stdout.flush(); time.sleep(600)"


def corpus() -> list[tuple[str, str, Path]]:
    """(kind, state, file) for every screen of the corpus."""
    out = []
    for path in sorted(CORPUS.glob("*/*.txt")):
        out.append((path.parent.name, path.name.split("-")[0], path))
    return out


SCREENS = corpus()


def _id(item: tuple[str, str, Path]) -> str:
    return f"{item[0]}/{item[2].stem}"


def test_the_corpus_covers_every_kind_and_state_it_draws() -> None:
    assert all(state in STATES for _, state, _ in SCREENS), [p.name for _, s, p in SCREENS if s not in STATES]
    found = {(kind, state) for kind, state, _ in SCREENS}
    for kind in SHIPPED.kinds:
        for state in ("working", "blocked", "idle"):
            if kind != "generic":  # the generic kind has blocked rules and a plain command's prompt only
                assert (kind, state) in found, (kind, state)
    assert {("generic", "blocked"), ("generic", "idle"), ("generic", "unknown")} <= found
    assert (CORPUS / "generic" / "idle-answered-question.txt").exists()


def _below_last_line(text: str) -> int:
    """Rows under the last non-empty one: where a program that printed `text` and waits has its cursor."""
    rows = text.rstrip("\n").split("\n")
    filled = len(screen_lines(text))
    return len(rows) - filled


@pytest.mark.parametrize(("kind", "state", "path"), SCREENS, ids=[_id(s) for s in SCREENS])
def test_each_screen_reads_its_state(kind: str, state: str, path: Path) -> None:
    text = path.read_text()
    plain = classify_screen(SHIPPED, kind, text)
    assert plain.state == state, (plain, path.name)
    # With the cursor where a program that drew the screen left it, the same.
    at_cursor = classify_screen(SHIPPED, kind, text, below_cursor=_below_last_line(text))
    assert at_cursor.state == state, (at_cursor, path.name)
    if state == "unknown":
        assert at_cursor.rule is None


def test_every_rule_runs_over_every_screen_and_each_is_used() -> None:
    """Each rule of a kind is tried on each screen of that kind: no rule of a higher rank than the verdict's
    matches (or it would have decided), and every shipped rule matches, in its window, a screen it is for."""
    used: set[str] = set()
    for kind, state, path in SCREENS:
        text = path.read_text()
        rows = [row for row in text.rstrip("\n").split("\n")]
        verdict = classify_screen(SHIPPED, kind, text)
        for rule in SHIPPED.kinds[kind].rules:
            filled = [line for line in screen_lines(text) if line.strip()]
            window = cursor_block(screen_lines(text), None)[-rule.lines:] if rule.at == "cursor" \
                else filled[-rule.lines:]
            if any(rule.regex.search(line) for line in window):
                used.add(rule.id)
                rank = ("blocked", "working", "idle").index(rule.state)
                assert state != "unknown" and rank >= ("blocked", "working", "idle").index(state), (rule.id, path)
        assert rows and (verdict.rule is None) == (state == "unknown")
    missing = {rule.id for kind in SHIPPED.kinds.values() for rule in kind.rules} - used
    assert not missing, f"rules no corpus screen exercises: {sorted(missing)}"


def test_an_answered_question_is_not_blocked_where_the_cursor_moved_on() -> None:
    """The bug as a user met it: a question, answered, five more lines and the prompt. The question was within
    the last ten lines, and read `blocked (generic.proceed)` for as long as it stayed on the screen."""
    text = (CORPUS / "generic" / "idle-answered-question.txt").read_text()
    for below in (None, 0, 3):
        assert classify_screen(SHIPPED, None, text, below_cursor=below).state != "blocked"
    # Where the cursor is, on the shell's prompt it went back to: a plain command's prompt (generic.prompt).
    assert classify_screen(SHIPPED, None, text, below_cursor=0).rule == "generic.prompt"
    # The cursor still on the question's line (nothing typed yet, the lines under it drawn by something else):
    # blocked, whatever lies below.
    asked = "Do you want to proceed? (y/n) \nstatus: 3 jobs queued\nnext run: 10:00\n"
    assert classify_screen(SHIPPED, None, asked).state == "unknown"
    assert classify_screen(SHIPPED, None, asked, below_cursor=2).rule == "generic.proceed"
    # A program that printed its question and a newline waits on the blank row under it.
    assert classify_screen(SHIPPED, None, "Do you want to proceed?\n\n\n", below_cursor=1).state == "blocked"


# -- the corpus in real tmux panes ----------------------------------------------------------------------------

def _settle(check: Any, what: str, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _as_read(state: str) -> str:
    return "idle" if state == "done" else state  # nobody looked at these panes: an idle screen is done


def test_every_screen_reads_its_state_in_a_real_tmux_pane(ws: Workspace, tmux: Tmux) -> None:
    """Each screen drawn by a program in a pane of its own (tmux renders the escapes, the carriage returns and
    the cursor), all read with one capture call, as `mam status` reads them."""
    server = tmux.name()
    names = {}
    for index, (kind, state, path) in enumerate(SCREENS):
        name = f"s{index}"
        names[name] = (kind, state, path)
        command = shlex.join([sys.executable, "-c", SHOW, str(path)])
        tmux.run(server, "new-session", "-d", "-x", "200", "-y", "40", "-s", name, command)
    listed = tmux.run(server, "list-panes", "-a", "-F", "#{session_name} #{pane_id}").stdout.split("\n")
    agents = tuple(Agent(name=line.split()[0], pane_id=line.split()[1]) for line in listed if line.strip())
    assert len(agents) == len(SCREENS)
    backend, ctx = TmuxBackend(), CallContext(timeout=30, env=ws.env)

    def drawn() -> bool:
        captured = backend.capture_panes(server, agents, ctx)
        assert isinstance(captured, dict)
        return all(screen_lines(c.text or "") for c in captured.values()) and len(captured) == len(agents)

    _settle(drawn, "the panes did not draw their screens")
    time.sleep(PROMPT_QUIET + 1)  # a plain command's prompt is idle once quiet (tmux counts whole seconds)
    captured = backend.capture_panes(server, agents, ctx)
    assert isinstance(captured, dict)
    wrong = {}
    for name, capture in captured.items():
        kind, state, path = names[name]
        assert capture.below_cursor is not None  # tmux says where the cursor is
        read = read_capture(SHIPPED, (kind,), capture, stale_after=1e9)
        if _as_read(read.state) != state:
            wrong[_id((kind, state, path))] = (read.state, read.evidence)
    assert not wrong


# -- the corpus in the fake zellij's panes ----------------------------------------------------------------------

def test_every_screen_reads_its_state_in_a_zellij_pane(ws: Workspace, zj: ZellijKit) -> None:
    """The same screens dumped by zellij, which gives no cursor: the last non-empty line stands for it. The real
    zellij cannot hold one pane per screen in one tab: it runs the answered flow below."""
    if zj.kind == "real":
        pytest.skip("one pane per screen does not fit one tab of the real zellij; the answered flow runs on it")
    zj.start("corpus")
    names = {}
    for index, (kind, state, path) in enumerate(SCREENS):
        made = zj.run("--session", "corpus", "run", "--name", f"s{index}", "--", sys.executable, "-c", SHOW,
                      str(path))
        assert made.returncode == 0, made.stderr
        names[made.stdout.strip().removeprefix("terminal_")] = (kind, state, path)
    agents = tuple(Agent(name=pane, pane_id=pane) for pane in names)
    backend, ctx = ZellijBackend(), CallContext(timeout=30, env=ws.env)

    def drawn() -> bool:
        captured = backend.capture_panes("corpus", agents, ctx)
        return isinstance(captured, dict) and len(captured) == len(agents) and all(
            screen_lines(c.text or "") for c in captured.values())

    _settle(drawn, "the panes did not draw their screens")
    captured = backend.capture_panes("corpus", agents, ctx)
    assert isinstance(captured, dict)
    wrong = {}
    for pane, capture in captured.items():
        kind, state, path = names[pane]
        read = read_capture(SHIPPED, (kind,), capture, stale_after=1e9)
        # zellij does not say when a pane last printed: a plain command's prompt is not known to be quiet.
        expected = "unknown" if (kind, state) == ("generic", "idle") else state
        if read.state != expected:
            wrong[_id((kind, state, path))] = (read.state, read.evidence)
    assert not wrong


# -- the answered question, end to end --------------------------------------------------------------------------

def _state(ws: Workspace, name: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    doc = ws.mam_json("status", env=env)
    found: dict[str, Any] = {s["name"]: s for s in doc["sessions"]}[name]
    return found


def _answered_flow(ws: Workspace, env: dict[str, str] | None, server: str, clock: bool) -> None:
    """`clock`: the backend says when a pane last printed (tmux), so a quiet prompt can read idle."""
    for name, kind in (("asker", "generic"), ("aider", "aider")):
        agent = ["--agent", kind] if kind != "generic" else []
        proc = ws.mam("spawn", name, *agent, "--server", server, "--command", sys.executable, "--", STANDIN,
                      kind, "ask", env=env)
        assert proc.returncode == 0, proc.stderr
    for name, rule in (("asker", "generic.proceed"), ("aider", "aider.confirm")):
        waited = ws.mam("wait", name, "--until", "blocked", "--timeout", "40", "--json", env=env)
        assert waited.returncode == 0, waited.stderr
        assert json.loads(waited.stdout)["session"]["evidence"]["rule"] == rule
        sent = ws.mam("send", name, "--answer", "y", "--enter", env=env)  # a blocked agent takes an answer
        assert sent.returncode == 0, sent.stderr
    # The aider stand-in printed on to its prompt: idle (done: nobody looked), never blocked again.
    waited = ws.mam("wait", "aider", "--until", "idle,done", "--timeout", "40", "--json", env=env)
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["session"]["evidence"]["rule"] == "aider.prompt"
    # The generic one went back to its shell prompt: idle once quiet (generic.prompt; unknown where the backend
    # cannot say it is quiet), never blocked by the question above it.
    until = "idle,done" if clock else "unknown"
    waited = ws.mam("wait", "asker", "--until", until, "--timeout", "40", "--json", env=env)
    assert waited.returncode == 0, waited.stderr
    state = _state(ws, "asker", env)
    assert state["evidence"]["rule"] == PROMPT_RULE and state["evidence"]["line"] == "$", state
    if not clock:
        assert state["state"] == "unknown" and "does not say when" in state["evidence"]["fact"]
    assert _state(ws, "aider", env)["state"] in ("idle", "done")


def test_an_answered_question_stops_being_blocked_on_real_tmux(ws: Workspace, tmux: Tmux) -> None:
    _answered_flow(ws, None, tmux.name(), clock=True)
    pane = tmux.run(next(iter(tmux.servers)), "capture-pane", "-p", "-t", "asker").stdout
    assert "Do you want to proceed? (y/n) y" in pane and pane.rstrip().endswith("$")  # the question is on screen


def test_an_answered_question_stops_being_blocked_on_zellij(ws: Workspace, zj: ZellijKit) -> None:
    zj.start("ask")
    _answered_flow(ws, {**ws.env, "MAM_BACKEND": "zellij"}, "ask", clock=False)


def test_a_capture_without_a_cursor_reads_the_last_line_as_the_cursor() -> None:
    capture = PaneCapture(text="Do you want to proceed? (y/n) \n")
    assert read_capture(SHIPPED, (None,), capture).evidence == {
        "rule": "generic.proceed", "line": "Do you want to proceed? (y/n)", "fact": None}
