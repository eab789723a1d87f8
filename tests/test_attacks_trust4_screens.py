"""Issue 30, point 2: a workspace's rule that runs away never freezes a caller that reads screens off the main
thread. `mam top` reads them in its poller threads, where the timer signal of the time limit never fires and
`re` holds the GIL while it matches: the view stopped drawing and taking keys, and only SIGKILL ended it. Off
the main thread a child process reads the screens, with the same limit, and is killed when it does not answer
(mam.kinds.worker)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_attacks_trust3 import SLOW_RULES

from conftest import Tmux, Workspace
from mam.kinds import worker
from mam.kinds.classify import LOST, Verdict
from mam.kinds.library import Kind, Library, Rule
from mam.kinds.reading import read_screen

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")
# Polynomial, not nested: the load-time check cannot know it; on a line of 1,000 `a`s it runs for years.
HOSTILE = "a.*a.*a.*a.*a.*a.*b"
HOSTILE_RULES = SLOW_RULES.format(pattern=HOSTILE)


def _library(pattern: str) -> Library:
    rule = Rule("slow.x", "idle", pattern, 5, re.compile(pattern))
    return Library({"slow": Kind("slow", ("slow",), (), None, (rule,))})


def _in_thread(call: Callable[[], Verdict], limit: float) -> tuple[Verdict | None, float, int]:
    """`call` in a thread of its own, while this thread counts 20 ms sleeps: its verdict, how long it took,
    and how many sleeps this thread got through meanwhile (none while a match holds the GIL)."""
    out: list[Verdict] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    began = time.monotonic()
    thread.start()
    ticks = 0
    while thread.is_alive() and time.monotonic() - began < limit:
        time.sleep(0.02)
        ticks += 1
    return (out[0] if out else None), time.monotonic() - began, ticks


@pytest.fixture
def fresh_reader() -> Iterator[worker.Reader]:
    """A reader of its own, so no other test's child (or a stopped one) is shared; its child ends with it."""
    reader = worker.Reader()
    try:
        yield reader
    finally:
        reader.stop()


def test_a_runaway_rule_read_off_the_main_thread_ends_at_the_time_limit_and_holds_no_other_thread(
        monkeypatch: pytest.MonkeyPatch, fresh_reader: worker.Reader) -> None:
    monkeypatch.setattr(worker, "_reader", fresh_reader)  # its child ends with the test
    # 300 `a`s: seconds of backtracking (a 1,500-`a` screen is years), which the old code spent holding the GIL.
    library = _library("a.*a.*a.*b")
    verdict, took, ticks = _in_thread(lambda: read_screen(library, "slow", "a" * 300 + "\n", budget=0.3), 60)
    assert verdict is not None and (verdict.state, verdict.overtime) == ("unknown", "slow.x"), verdict
    assert took < 0.3 + worker.GRACE + worker.START_TIMEOUT, took
    # This thread ran on meanwhile: at least a third of the sleeps it would have had alone.
    assert ticks >= took / 0.02 / 3, (ticks, took)
    # The next screen, an ordinary one, is read by the same child and gets its verdict.
    ok = _library("^ready$")
    verdict, took, _ = _in_thread(lambda: read_screen(ok, "slow", "work\nready\n", budget=0.3), 30)
    assert verdict is not None and (verdict.state, verdict.rule, verdict.line) == ("idle", "slow.x", "ready")


def test_a_screen_reader_that_does_not_answer_is_killed_and_replaced(fresh_reader: worker.Reader) -> None:
    library = _library("^ready$")
    assert fresh_reader.classify(library, "slow", "ready\n", 0.5, None).state == "idle"
    child = fresh_reader._child
    assert child is not None
    os.kill(child.proc.pid, signal.SIGSTOP)  # hung: it reads nothing more and answers nothing
    began = time.monotonic()
    verdict = fresh_reader.classify(library, "slow", "ready\n", 0.5, None)
    took = time.monotonic() - began
    assert (verdict.state, verdict.overtime) == ("unknown", LOST), verdict
    assert took < 0.5 + worker.GRACE + 5, took  # room for a loaded machine; unbounded before
    assert child.proc.poll() is not None  # killed, not left stopped
    # The next screen starts a new reader, which answers.
    assert fresh_reader.classify(library, "slow", "ready\n", 0.5, None).state == "idle"
    assert fresh_reader.started == 2


def test_a_screen_larger_than_the_pipe_to_a_reader_that_reads_no_more_is_lost_not_waited_for(
        fresh_reader: worker.Reader) -> None:
    """A screen is up to $MAM_MAX_OUTPUT bytes and a pipe holds 64 KiB: the frame is written within the same
    deadline as the answer is waited for (it blocked, holding every other thread's reading, for good)."""
    library = _library("^ready$")
    assert fresh_reader.classify(library, "slow", "ready\n", 0.5, None).state == "idle"
    child = fresh_reader._child
    assert child is not None
    os.kill(child.proc.pid, signal.SIGSTOP)
    verdict, took, _ = _in_thread(
        lambda: fresh_reader.classify(library, "slow", "x" * 1_000_000 + "\nready\n", 0.5, None), 30)
    assert verdict is not None and (verdict.state, verdict.overtime) == ("unknown", LOST), (verdict, took)
    assert took < 0.5 + worker.GRACE + 5, took
    assert child.proc.poll() is not None  # killed, not left stopped
    assert fresh_reader.classify(library, "slow", "x" * 1_000_000 + "\nready\n", 0.5, None).line == "ready"


def test_more_rule_sets_than_the_reader_keeps_are_sent_again(fresh_reader: worker.Reader) -> None:
    libraries = [_library(f"^ready{n}$") for n in range(worker.KEEP + 2)]  # one per workspace, say
    for n, library in enumerate(libraries):
        assert fresh_reader.classify(library, "slow", f"ready{n}\n", 1.0, None).state == "idle"
    # The first is no longer kept by the child: sent again, read by the same child.
    assert fresh_reader.classify(libraries[0], "slow", "ready0\n", 1.0, None).line == "ready0"
    assert fresh_reader.started == 1


def test_a_lost_reading_says_so_in_the_state(monkeypatch: pytest.MonkeyPatch, fresh_reader: worker.Reader) -> None:
    from mam.agents.agentstate import read_capture
    from mam.plugin.records import PaneCapture

    monkeypatch.setattr(worker, "_reader", fresh_reader)
    library = _library("^ready$")
    capture = PaneCapture(text="ready\n")
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(read_capture(library, ("slow",), capture, budget=0.5)))
    thread.start()
    thread.join(30)
    assert getattr(out[0], "state", None) == "idle", out
    assert fresh_reader._child is not None
    os.kill(fresh_reader._child.proc.pid, signal.SIGSTOP)
    out.clear()
    thread = threading.Thread(target=lambda: out.append(read_capture(library, ("slow",), capture, budget=0.5)))
    thread.start()
    thread.join(30)
    state = out[0]
    assert getattr(state, "state", None) == "unknown", state
    fact = getattr(state, "evidence", {})["fact"]
    assert "not read within 0.5 s" in fact and "did not answer" in fact, fact


# -- the real view, in a real terminal ----------------------------------------------------------------------


def _hostile_fleet(ws: Workspace, tmux: Tmux) -> str:
    """A workspace whose .mam/states.yaml has the runaway rule, an agent of that kind showing 1,500 `a`s, and a
    blocked agent beside it on the same server (read in the same call)."""
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "states.yaml").write_text(HOSTILE_RULES)
    server = tmux.name()
    proc = ws.mam("spawn", "slow", "--agent", "slowkind", "--server", server, "--command", sys.executable, "--",
                  "-c", "print('a' * 1500, flush=True); import time; time.sleep(600)")
    assert proc.returncode == 0, proc.stderr
    proc = ws.mam("spawn", "asker", "--agent", "codex", "--server", server, "--command", sys.executable, "--",
                  STANDIN, "codex", "blocked")
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 20
    while "aaaa" not in tmux.run(server, "capture-pane", "-p", "-J", "-t", "slow").stdout:
        assert time.monotonic() < deadline, "the agent drew nothing"
        time.sleep(0.1)
    return server


def _pane(tmux: Tmux, term: str, fmt: str) -> str:
    return tmux.run(term, "display-message", "-p", "-t", "top", fmt).stdout.strip()


def _screen(tmux: Tmux, term: str) -> str:
    return tmux.run(term, "capture-pane", "-p", "-t", "top").stdout


def _until(ok: Callable[[], bool], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while not ok():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _row(screen: str, name: str) -> str:
    return next((line for line in screen.splitlines() if line.split()[:1] == [name]), "")


def _worker_of(pid: int) -> int | None:
    """The screen reader child of process `pid`, if it has one."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid) \
                    and b"mam.kinds.worker" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def _gone(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("ending", ["q", "C-c", "SIGTERM"])
def test_top_over_a_runaway_rule_keeps_drawing_and_ends_on_q_ctrl_c_and_sigterm(ws: Workspace, tmux: Tmux,
                                                                                 ending: str) -> None:
    pytest.importorskip("textual")
    _hostile_fleet(ws, tmux)
    term = tmux.name()  # the user's terminal: a pane of a private tmux server, 150x30
    tmux.run(term, "new-session", "-d", "-x", "150", "-y", "30", "-s", "top", "-c", str(ws.root),
             "env", "-u", "TMUX", sys.executable, "-m", "mam", "top", "--interval", "0.5")
    tmux.run(term, "set-option", "-t", "top", "remain-on-exit", "on")
    pid = int(_pane(tmux, term, "#{pane_pid}"))
    try:
        # The blocked agent shows, and the runaway screen is `unknown`, naming its rule, as `mam status` says.
        assert _until(lambda: "blocked" in _row(_screen(tmux, term), "asker")
                      and "took more than" in _row(_screen(tmux, term), "slow"), 40), _screen(tmux, term)
        assert "slowkind.idle" in _row(_screen(tmux, term), "slow")
        # And the view goes on: the ages tick (one redraw a second at least) and the title says a recent refresh.
        before = _row(_screen(tmux, term), "asker")
        assert _until(lambda: _row(_screen(tmux, term), "asker") != before, 10), before
        ages = [int(a) for a in re.findall(r"refreshed (\d+)s ago", _screen(tmux, term))]
        assert ages and ages[0] <= 5, _screen(tmux, term)
        reader = _worker_of(pid)
        assert reader is not None  # the screens are read by the child process, not in top's threads
        if ending == "SIGTERM":
            os.kill(pid, signal.SIGTERM)
        else:
            tmux.run(term, "send-keys", "-t", "top", ending)
        assert _until(lambda: _pane(tmux, term, "#{pane_dead}") == "1", 10), _screen(tmux, term)
        # The terminal is given back: no alternate screen, no mouse reporting; and the reader ended with it.
        assert _pane(tmux, term, "#{alternate_on} #{mouse_any_flag} #{mouse_sgr_flag}") == "0 0 0"
        # tmux 3.3a can list a pane dead before it has reaped its program, and at times misses the SIGCHLD until
        # another child of the server ends (docs/backends.md): a `run-shell true` makes one, as mam does.
        assert _until(lambda: tmux.run(term, "run-shell", "true", check=False) is not None
                      and _pane(tmux, term, "#{pane_dead_status}") != "", 10)
        assert _pane(tmux, term, "#{pane_dead_status}") == ("143" if ending == "SIGTERM" else "0")
        assert _until(lambda: _gone(reader), 5)
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


# -- the commands that read on the main thread stay within their bounds ------------------------------------


def test_watch_and_wait_over_a_runaway_rule_end_within_their_bounds(ws: Workspace, tmux: Tmux) -> None:
    _hostile_fleet(ws, tmux)
    env = {**ws.env, "MAM_SCREEN_TIMEOUT": "1"}
    # wait: the blocked one is reached at the first poll, the runaway screen beside it costs its second.
    began = time.monotonic()
    proc = ws.mam("wait", "asker", "slow", "--any", "--until", "blocked", "--timeout", "20", env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - began < 15
    # watch: reads its baseline, says it watches, and ends on Ctrl-C (exit 0), each pass bounded.
    watch = subprocess.Popen([sys.executable, "-m", "mam", "watch", "--interval", "0.5"], env=env, cwd=ws.root,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stderr is not None
        began = time.monotonic()
        line = watch.stderr.readline()
        assert "watching 2 agents" in line, line
        assert time.monotonic() - began < 15
        time.sleep(2)  # two more passes over the runaway screen
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=10) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
