"""Attack cases of issue 30 (fourth trust round), points 3, 4 and 11: one pane that blinds every agent of its
server by printing more than one answer may hold, a hook report that names no pane and no process (or lies
behind a linked folder) taken as an agent's own word, and invisible characters quoted as evidence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sshd import Sshd

from conftest import Tmux, Workspace
from mam.agents.remains import row_fields
from mam.agents.sources import Report, reports, set_aside
from mam.hooks.report import write
from mam.plugin.records import PaneCapture, Remains
from mam.util.errors import MamError

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")
FAKES = Path(__file__).parent / "fakes"
NOW = 1_000_000.0
# Fills its terminal once it is at least COLS x ROWS (the test resizes its window after the spawn), every cell
# but the last of each row, then stays.
FILL = """import os, sys, time
cols, rows = int(sys.argv[1]), int(sys.argv[2])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    size = os.get_terminal_size(1)
    if size.columns >= cols and size.lines >= rows:
        break
    time.sleep(0.05)
line = "x" * (size.columns - 1)
sys.stdout.write("\\r\\n".join([line] * size.lines))
sys.stdout.flush()
time.sleep(600)
"""


def spawn(ws: Workspace, name: str, server: str, *args: str, agent: str = "claude") -> None:
    proc = ws.mam("spawn", name, "--agent", agent, "--server", server, "--command", sys.executable, "--", *args)
    assert proc.returncode == 0, proc.stderr


def sessions(ws: Workspace, **env: str) -> dict[str, dict[str, Any]]:
    doc = ws.mam_json("status", env={**ws.env, **env} if env else None)
    return {s["name"]: s for s in doc["sessions"]}


def until(ws: Workspace, check: Any, what: str, **env: str) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        found = sessions(ws, **env)
        if check(found):
            return found
        assert time.monotonic() < deadline, f"{what}: {found}"
        time.sleep(0.2)


# -- 3. one pane makes every agent on its tmux server unknown ---------------------------------------------------


def huge_pane(ws: Workspace, tmux: Tmux, server: str, name: str, cols: int, rows: int, tmp_path: Path) -> None:
    """Agent `name`, its window resized to `cols` x `rows` and every row of it filled."""
    fill = tmp_path / "fill.py"
    fill.write_text(FILL)
    spawn(ws, name, server, str(fill), str(cols), str(rows))
    tmux.run(server, "resize-window", "-t", f"={name}:", "-x", str(cols), "-y", str(rows))
    size = tmux.run(server, "display-message", "-p", "-t", f"={name}:", "#{pane_width}x#{pane_height}").stdout
    assert size.strip() == f"{cols}x{rows}"
    deadline = time.monotonic() + 60
    while "xxxx" not in tmux.run(server, "capture-pane", "-p", "-t", f"={name}:", "-S", str(rows - 1)).stdout:
        assert time.monotonic() < deadline, "the pane was not filled"
        time.sleep(0.2)


def neighbours(ws: Workspace, server: str) -> None:
    spawn(ws, "calm", server, STANDIN, "claude", "idle")
    spawn(ws, "asker", server, STANDIN, "claude", "blocked")


def test_a_huge_pane_is_unknown_alone_and_its_neighbours_keep_their_states(ws: Workspace, tmux: Tmux,
                                                                          tmp_path: Path) -> None:
    """The issue's case: a window of 4300x4000 filled prints 17.2 MB, more than $MAM_MAX_OUTPUT (16 MiB): the
    capture of the whole server was thrown away. tmux now captures no screen of more than PANE_CELLS cells."""
    server = tmux.name()
    neighbours(ws, server)
    huge_pane(ws, tmux, server, "huge", 4300, 4000, tmp_path)
    found = until(ws, lambda f: f["asker"]["state"] == "blocked", "the neighbours keep their states")
    assert found["asker"]["state_source"] == "screen"
    assert found["calm"]["state"] in ("idle", "done") and found["calm"]["state_source"] == "screen", found["calm"]
    assert found["huge"]["state"] == "unknown"
    assert found["huge"]["evidence"]["fact"] == ("its pane is 4300x4000, 17200000 cells: more than the 400000 mam "
                                                 "reads of one screen, so it was not captured"), found["huge"]
    table = ws.mam("status", env={**ws.env, "COLUMNS": "250"}).stdout
    assert "4300x4000" in table and "blocked" in table
    peek = ws.mam("peek", "huge")
    assert peek.returncode == 1 and "huge's screen was not read: its pane is 4300x4000" in peek.stderr, peek.stderr


def test_a_pane_that_prints_more_than_one_answer_is_the_only_one_unread(ws: Workspace, tmux: Tmux,
                                                                       tmp_path: Path) -> None:
    """A pane small enough to be captured can still print more than one answer may hold (here $MAM_MAX_OUTPUT
    is 16K and it prints 30 KB): the batch is then asked pane by pane, and only that pane is unread."""
    server = tmux.name()
    neighbours(ws, server)
    huge_pane(ws, tmux, server, "wide", 300, 100, tmp_path)
    found = until(ws, lambda f: f["asker"]["state"] == "blocked", "the neighbours keep their states",
                  MAM_MAX_OUTPUT="16K")
    assert found["calm"]["state"] in ("idle", "done") and found["calm"]["state_source"] == "screen", found["calm"]
    assert (found["wide"]["state"], found["wide"]["state_source"]) == ("unknown", "none")
    assert found["wide"]["evidence"]["fact"] == ("its screen printed more than one answer may hold "
                                                 "($MAM_MAX_OUTPUT), so it was not read")
    # With the default limit the same pane is read as any other.
    assert sessions(ws)["wide"]["evidence"]["fact"] == "no rule matches the screen"


def test_on_zellij_a_pane_that_prints_too_much_says_so_and_blinds_no_other(ws: Workspace) -> None:
    """zellij dumps each pane by a call of its own: the loud pane alone is unread, and now says why."""
    env = {**ws.env, "MAM_BACKEND": "zellij"}
    loud = "import sys, time; sys.stdout.write(('x' * 100 + '\\n') * 300); sys.stdout.flush(); time.sleep(600)"
    try:
        for name, args in (("calm", (STANDIN, "codex", "idle")), ("loud", ("-c", loud))):
            proc = ws.mam("spawn", name, "--agent", "codex", "--server", "zz", "--command", sys.executable, "--",
                          *args, env=env)
            assert proc.returncode == 0, proc.stderr
        found = until(ws, lambda f: f["calm"]["state"] == "idle" and f["loud"]["evidence"]["fact"] != (
            "its pane was not captured"), "the calm one idle", MAM_MAX_OUTPUT="16K")
        assert found["loud"]["state"] == "unknown"
        assert found["loud"]["evidence"]["fact"] == ("its screen printed more than one answer may hold "
                                                     "($MAM_MAX_OUTPUT), so it was not read")
    finally:
        subprocess.run([str(FAKES / "zellij"), "kill-session", "zz"], env=ws.env, capture_output=True, timeout=30)


def test_a_batch_to_a_host_that_prints_too_much_is_asked_call_by_call(sshd: Sshd) -> None:
    """Over ssh, the calls made together to one host run in one script, whose answer may hold all their shares:
    when one call prints more than that, the others still get their own answers."""
    import threading

    from mam.calls import runner
    from mam.calls.batch import Batch
    from mam.calls.route import Route
    from mam.calls.transport import SshTransport

    control = Path(tempfile.mkdtemp(prefix="mb", dir="/tmp")) / "ssh"
    route = Route(SshTransport(sshd.host, control, 10, ssh_config=sshd.config_path), (), {})
    argvs = [["echo", "one"], ["head", "-c", "200000", "/dev/zero"], ["echo", "two"]]
    batch = Batch(expected=len(argvs))
    results: dict[int, runner.CommandResult] = {}

    def call(i: int) -> None:
        results[i] = batch.run(route, argvs[i], timeout=20, env=sshd.env)

    limit = runner.max_output()
    runner.set_max_output(16 * 1024)  # the three shares together: 48 KiB, less than the 200 KB of one call
    try:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(argvs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        runner.set_max_output(limit)
        sshd.close_masters(control)
        shutil.rmtree(control.parent, ignore_errors=True)
    assert [(results[i].returncode, results[i].stdout) for i in (0, 2)] == [(0, "one\n"), (0, "two\n")], results
    assert results[1].over_limit and results[1].returncode is None


# -- 4. a hook report that names no pane and no process ---------------------------------------------------------


def test_a_report_that_names_no_pane_and_no_process_proves_nothing() -> None:
    capture = PaneCapture("x", pid=30, idle_seconds=4.0)
    orphan = Report("blocked", NOW - 5, {}, ())
    assert set_aside(orphan, "%3", capture, NOW) == "its hook report names no pane and no process: it proves nothing"
    assert set_aside(orphan, "w1:p2", None, NOW) is not None  # herdr: no process to check, and no pane named
    # One of the two shared is enough: the pane (herdr tells no process), or the process (no pane variable).
    assert set_aside(Report("idle", NOW - 5, {"HERDR_PANE_ID": "w1:p2"}, ()), "w1:p2", None, NOW) is None
    assert set_aside(Report("idle", NOW - 5, {}, (40, 30)), "%3", capture, NOW) is None
    # A pane variable and processes, none of which mam can check against the agent: nothing proven.
    assert "shares no pane and no process" in str(set_aside(Report("idle", NOW - 5, {"TMUX_PANE": "%3"}, (30,)),
                                                            None, None, NOW))


def test_an_orphaned_report_does_not_decide_on_real_tmux(ws: Workspace, tmux: Tmux) -> None:
    """The issue's case: `mam report blocked` with MAM_AGENT=coder from outside any pane wrote `"panes": {},
    "pids": []`, and status said `coder blocked: its own hook reported blocked`."""
    server = tmux.name()
    spawn(ws, "coder", server, STANDIN, "claude", "garbage")
    folder = ws.root / ".mam" / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "coder.json").write_text(json.dumps({"schema": 1, "agent": "coder", "state": "blocked",
                                                   "time": time.time(), "panes": {}, "pids": []}))
    coder = sessions(ws)["coder"]
    assert (coder["state"], coder["state_source"]) == ("unknown", "screen"), coder
    assert coder["evidence"]["fact"] == ("no rule matches the screen; its hook report names no pane and no process: "
                                         "it proves nothing")


def _planted(ws: Workspace, tmux: Tmux, server: str, layout: str, tmp_path: Path) -> None:
    """A report for `coder` that would hold (its pane, its pane's process, fresh) put where `layout` says: the
    reports folder a link to a folder anyone may write, `.mam` itself a link, or the report file a link."""
    pane, pid = tmux.run(server, "display-message", "-p", "-t", "=coder:", "#{pane_id} #{pane_pid}").stdout.split()
    body = json.dumps({"schema": 1, "agent": "coder", "state": "blocked", "time": time.time(),
                       "panes": {"TMUX_PANE": pane}, "pids": [int(pid)]})
    elsewhere = tmp_path / "world-writable"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    dot = ws.root / ".mam"
    if layout == "reports":
        (elsewhere / "coder.json").write_text(body)
        (dot / "reports").symlink_to(elsewhere)
    else:
        (dot / "reports").mkdir()
        (elsewhere / "coder.json").write_text(body)
        (dot / "reports" / "coder.json").symlink_to(elsewhere / "coder.json")


@pytest.mark.parametrize("layout", ["reports", "file"])
def test_a_report_behind_a_link_is_never_read(ws: Workspace, tmux: Tmux, tmp_path: Path, layout: str) -> None:
    server = tmux.name()
    spawn(ws, "coder", server, STANDIN, "claude", "garbage")
    _planted(ws, tmux, server, layout, tmp_path)
    coder = sessions(ws)["coder"]
    assert (coder["state"], coder["state_source"]) == ("unknown", "screen"), coder


def test_reading_refuses_the_links_that_writing_refuses(tmp_path: Path) -> None:
    """`mam report` refuses to write through a linked `.mam` or `.mam/reports`; status reads no report there."""
    body = {"schema": 1, "agent": "a", "state": "idle", "time": NOW, "panes": {"TMUX_PANE": "%3"}, "pids": [1]}
    target = tmp_path / "target"
    (target / "reports").mkdir(parents=True)
    (target / "reports" / "a.json").write_text(json.dumps(body))
    for layout in (".mam", "reports"):
        root = tmp_path / layout.strip(".")
        root.mkdir()
        if layout == ".mam":
            (root / ".mam").symlink_to(target)
        else:
            (root / ".mam").mkdir()
            (root / ".mam" / "reports").symlink_to(target / "reports")
        with pytest.raises(MamError, match="symbolic link"):
            write(str(root), "a", body)
        assert reports(root / ".mam", ["a"]) == {}, layout
    # The same folder, not linked: written and read.
    plain = tmp_path / "plain"
    plain.mkdir()
    write(str(plain), "a", body)
    assert reports(plain / ".mam", ["a"])["a"].state == "idle"


# -- 11. invisible characters quoted as evidence ----------------------------------------------------------------

HIDDEN = "\u202e\u200b\U000e0041\u2066"  # a bidi override, a zero-width space, a tag character, an isolate


def test_a_title_is_quoted_cleaned_as_a_screen_line_is(ws: Workspace, tmux: Tmux) -> None:
    """A title set by OSC 2 with invisible characters: `status --json` quotes it without them. (tmux 3.3a keeps
    no title holding a C1 control, from OSC 2 or `select-pane -T`: those reach mam in screen lines only.)"""
    server = tmux.name()
    spawn(ws, "titled", server, STANDIN, "claude", "garbage", "--title", "✳\u202e Clau\u200bde Code\U000e0041\u2066")
    raw = tmux.run(server, "display-message", "-p", "-t", "=titled:", "#{pane_title}").stdout
    assert "\u202e" in raw and "\U000e0041" in raw  # tmux keeps them: mam must not quote them
    found = until(ws, lambda f: f["titled"]["state_source"] == "title", "the title decides")["titled"]
    assert found["evidence"]["line"] == "✳ Claude Code", found
    # Set by a program in the pane through tmux itself: a Hangul filler and a variation selector.
    tmux.run(server, "select-pane", "-t", "=titled:", "-T", "\u200b✳ Claude\u3164 Ready\ufe0f\U000e0100")
    found = until(ws, lambda f: f["titled"]["evidence"]["line"] != "✳ Claude Code", "the new title")["titled"]
    assert found["evidence"]["line"] == "✳ Claude Ready", found
    assert not any(ch in json.dumps(found, ensure_ascii=False) for ch in HIDDEN + "\u3164\ufe0f\U000e0100")


def test_an_ended_panes_last_lines_are_cleaned_as_a_screen_line_is() -> None:
    """What isprintable let through: a Hangul filler (a letter that shows as a blank), variation selectors
    (a hidden byte each), the combining grapheme joiner and the braille blank."""
    app = SimpleNamespace(env={})
    row = SimpleNamespace(spec={})
    line = "error\u3164: no\ufe0f GPU\U000e0100 left\u034f\u2800" + HIDDEN + "\x85"
    kept = row_fields(app, row, Remains(exit_status=1, lines=(line,)), "now")  # type: ignore[arg-type]
    assert kept["last_output"] == ["error: no GPU left"]


def test_a_registrys_last_lines_are_shown_cleaned(ws: Workspace, tmux: Tmux) -> None:
    """A clone's registry is anyone's text: the last lines a row claims are cleaned before status shows them."""
    ws.write_registry('version: 1\nsessions:\n  - {name: gone, backend: tmux, server: nowhere, status: terminated, '
                      'exit_status: 1, ended_at: "2026-01-01T00:00:00Z", '
                      'last_output: ["ok\\u202e\\u200b\\U000e0041 done\\u3164", "fine"]}\n')
    entry = sessions(ws)["gone"]
    assert entry["last_output"] == ["ok done", "fine"], entry


def test_a_backends_reason_for_an_unread_screen_is_cleaned() -> None:
    from mam.agents.agentstate import read_capture
    from mam.kinds.library import load_library

    state = read_capture(load_library(None), ("claude",), PaneCapture(None, unread="too large\u202e" + HIDDEN))
    assert state.evidence is not None and state.evidence["fact"] == "too large"


def test_the_reports_folder_is_opened_once_for_all(tmp_path: Path) -> None:
    """Reading several reports opens the folder once and closes it: no descriptor is left open."""
    before = len(os.listdir("/proc/self/fd"))
    (tmp_path / ".mam").mkdir()
    assert reports(tmp_path / ".mam", ["a", "b"]) == {}
    (tmp_path / ".mam" / "reports").mkdir()
    assert reports(tmp_path / ".mam", ["a", "b"]) == {}
    assert len(os.listdir("/proc/self/fd")) == before
