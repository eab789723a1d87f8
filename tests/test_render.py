"""Tables a person reads: fitted to the terminal, paths cut in the middle, colour only where it works."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

import pytest

from conftest import Workspace

LONG = "/home/someone/projects/" + "very-long-folder-name/" * 5 + "the-repo"


def _registry(ws: Workspace) -> None:
    ws.write_registry("version: 1\nsessions:\n" + "".join(
        f'- {{"name": "agent-{i}", "backend": "herdr", "server": "srv", "status": "running", '
        f'"pane": {{"cwd": "{LONG}-{i}"}}}}\n' for i in range(3)))


def test_status_fits_the_terminal_and_cuts_paths_in_the_middle(ws: Workspace) -> None:
    _registry(ws)
    ws.herdr.start("srv")
    # Without states: an absent row's WHY (why it is not running) would take the room of the paths tested here.
    proc = ws.mam("status", "--no-state", env={**ws.env, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("\n\n")[0].splitlines()[1:]
    assert table and all(len(line) <= 80 for line in table), table
    rows = [line for line in table if line.startswith("agent-")]
    assert len(rows) == 3, table
    for i, row in enumerate(rows):
        cwd = row.split()[-1]
        assert "…" in cwd and cwd.startswith("/home/") and cwd.endswith(f"-repo-{i}"), cwd
        assert row.startswith(f"agent-{i}  herdr  "), row  # the short columns are whole


def test_into_a_pipe_nothing_is_cut(ws: Workspace) -> None:
    _registry(ws)
    env = {k: v for k, v in ws.env.items() if k != "COLUMNS"}
    out = ws.mam("status", env=env).stdout
    assert f"{LONG}-0" in out and "…" not in out


def _on_a_terminal(ws: Workspace, env: dict[str, str]) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "mam", "status"], env=env, cwd=ws.root, stdout=slave,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(master, 4096)
        except OSError:  # the terminal closed: mam is done
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_but_not_with_term_dumb(ws: Workspace) -> None:
    ws.write_registry('version: 1\nsessions:\n- {"name": "a", "backend": "herdr", "server": "nowhere"}\n')
    env = {k: v for k, v in ws.env.items() if k != "NO_COLOR"}
    assert "\x1b[" in _on_a_terminal(ws, {**env, "TERM": "xterm"})
    assert "\x1b[" not in _on_a_terminal(ws, {**env, "TERM": "dumb"})


def test_reconcile_never_says_matches_unless_every_server_answered(ws: Workspace) -> None:
    ws.write_registry('version: 1\nsessions:\n- {"name": "a", "backend": "herdr", "server": "s1", '
                      '"status": "running"}\n')
    proc = ws.mam("reconcile", env={**ws.env, "PATH": "/nonexistent"})
    assert proc.returncode == 3
    assert "matches" not in proc.stdout
    assert "unconfirmed" in proc.stdout and "a (server s1)" in proc.stdout
    assert proc.stderr.startswith("mam: 1 server could not be asked (not installed)")


def test_reconcile_says_what_each_drift_class_means_and_how_to_clear_it(ws: Workspace) -> None:
    ws.write_registry('version: 1\nsessions:\n- {"name": "a", "backend": "herdr", "server": "gone", '
                      '"status": "running"}\n')
    out = ws.mam("reconcile").stdout
    assert "A: registered starting/running, but its server is down or up without it" in out
    assert "--apply marks it terminated" in out and "mam prune" in out
    assert "nothing written; run with --apply to fix" in out


def test_reconcile_with_nothing_registered_does_not_claim_a_match(ws: Workspace) -> None:
    out = ws.mam("reconcile").stdout
    assert "no agent is registered here, so no server was asked" in out and "matches" not in out


def test_tables_never_cut_names_states_or_actions(ws: Workspace) -> None:
    ws.write_registry('version: 1\nsessions:\n- {"name": "a-rather-long-agent-name", "backend": "herdr", '
                      f'"server": "gone", "status": "running", "pane": {{"cwd": "{LONG}"}}}}\n')
    env = {**ws.env, "COLUMNS": "60"}
    for args in (["status"], ["reconcile"]):
        out = ws.mam(*args, env=env).stdout
        # status leaves the registry's word out for the reason (issue 33, 17) and says so; it never cuts it
        assert "a-rather-long-agent-name" in out and ("running" in out or "STATUS left out" in out), out
    assert "mark_terminated" in ws.mam("reconcile", env=env).stdout


def test_a_workspace_path_with_escape_sequences_prints_inert() -> None:
    from mam.util.render import reconcile_text, status_text

    evil = "/tmp/a\x1b]2;pwned\x07\nb"
    status = status_text({"workspace": evil, "registry": evil + "/.mam/registry.yaml", "sessions": [],
                          "servers": []})
    reconcile = reconcile_text({"workspace": evil, "registry": evil + "/r.yaml", "servers": [], "drifts": [],
                                "confirmed": True, "unconfirmed": [], "applied": True, "written": 1})
    for text in (status, reconcile):
        assert "\x1b" not in text and "\x07" not in text and "\\x1b]2;pwned\\x07\\nb" in text


def test_bidi_overrides_and_zero_width_marks_are_written_out() -> None:
    from mam.util.render import visible

    shown = visible("x\u202egnp.exe\u200b\u2066y\ufeff")
    assert shown == "x\\u202egnp.exe\\u200b\\u2066y\\ufeff"
    assert visible("caf\u00e9 \u2713") == "caf\u00e9 \u2713"  # ordinary non-ASCII text is left alone


def test_an_absent_agent_shows_no_pane_since_its_last_one_may_be_anothers() -> None:
    from mam.util.render import status_text

    def session(name: str, live: str, pane: str) -> dict[str, object]:
        return {"name": name, "backend": "tmux", "server": "team", "host": None, "status": "running", "live": live,
                "agent": "claude", "pane_id": pane, "cwd": "/repo", "state": None, "state_source": None,
                "evidence": None}

    text = status_text({"workspace": "/repo", "registry": "/repo/.mam/agent-sessions.yaml", "servers": [],
                        "sessions": [session("gone", "absent", "%3"), session("here", "alive", "%3"),
                                     session("asked", "unknown", "%4")]})
    lines = {line.split()[0]: line for line in text.splitlines()[2:]}
    assert "%3" not in lines["gone"] and "%3" in lines["here"] and "%4" in lines["asked"]


def test_a_narrow_terminal_leaves_columns_out_rather_than_cut_every_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """With STATE and WHY an 80-column table cut CWD and WHY to six characters each, which told nobody anything:
    one backend's column, then CWD, are left out first (and said so); wide enough, nothing is."""
    from mam.util.render import status_text

    session = {"name": "demo-claude", "backend": "tmux", "server": "mam-demo", "host": None, "status": "running",
               "live": "alive", "agent": "claude", "pane_id": "%1", "cwd": "/tmp/mam-demo-x1y2z3/workspace",
               "state": "blocked", "state_source": "screen",
               "evidence": {"rule": "claude.permission", "line": "Do you want to proceed?", "fact": None}}
    doc = {"workspace": "/w", "registry": "/w/r", "servers": [], "sessions": [session, {**session, "name": "b"}]}
    monkeypatch.setenv("COLUMNS", "80")
    lines = status_text(doc).splitlines()
    assert lines[1].split() == ["NAME", "SERVER", "STATUS", "LIVE", "STATE", "AGENT", "PANE", "WHY"]
    assert "claude.permission" in lines[2] and all(len(line) <= 80 for line in lines[1:4])
    assert lines[4] == "(BACKEND, CWD left out to fit the terminal: `mam status --json` has them)"
    monkeypatch.setenv("COLUMNS", "160")
    lines = status_text(doc).splitlines()
    assert "BACKEND" in lines[1] and "CWD" in lines[1] and "left out" not in "\n".join(lines)
    monkeypatch.setenv("COLUMNS", "80")
    two = status_text({**doc, "sessions": [session, {**session, "name": "b", "backend": "zellij"}]}).splitlines()
    assert "BACKEND" in two[1] and "CWD" not in two[1]  # two backends: the column says which is which


def test_at_80_columns_pane_live_and_status_give_way_before_why_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33, 17: WHY is the most useful column, and an 80-column table cut it first; now CWD, PANE and LIVE
    are left out (in that order, only as far as needed) and the reason reads whole."""
    from mam.util.render import status_text

    reason = "claude.footer: quiet for 3 min"
    session = {"name": "coder-1", "backend": "tmux", "server": "work", "host": None, "status": "running",
               "live": "alive", "agent": "claude", "pane_id": "%12", "cwd": "/w", "state": "done",
               "state_source": "screen", "evidence": {"rule": "claude.footer", "line": None,
                                                          "fact": reason.removeprefix("claude.footer: ")}}
    doc = {"workspace": "/w", "registry": "/w/r", "servers": [], "sessions": [session]}
    monkeypatch.setenv("COLUMNS", "80")
    lines = status_text(doc).splitlines()
    assert reason in lines[2] and len(lines[2]) <= 80
    assert lines[1].split() == ["NAME", "SERVER", "STATUS", "LIVE", "STATE", "AGENT", "WHY"]  # only as far as needed
    assert lines[3] == "(BACKEND, CWD, PANE left out to fit the terminal: `mam status --json` has them)"
    monkeypatch.setenv("COLUMNS", "160")
    wide = status_text(doc).splitlines()
    assert {"PANE", "LIVE", "STATUS", "WHY"} <= set(wide[1].split()) and reason in wide[2]
    assert "left out" not in "\n".join(wide)


def test_at_80_columns_status_too_gives_way_and_a_long_reason_is_cut_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33, 17: the end of a failed job is the line a person reads the table for; at 80 columns CWD, PANE,
    LIVE and STATUS are left out (STATE and WHY say the same) before a character of it is cut. Where even that is
    not enough, the reason loses its end, and only once every one of them is gone. At 160 columns all are shown."""
    from mam.util.render import status_text

    failed = "failed: nightly-job exited with status 3"
    sessions = [
        {"name": "nightly-job", "backend": "tmux", "server": "work", "host": None, "status": "running",
         "live": "absent",
         "agent": None, "pane_id": "%3", "cwd": "/home/me/repo", "state": "unknown", "state_source": "none",
         "evidence": {"rule": None, "line": None, "fact": failed}},
        {"name": "coder-1", "backend": "tmux", "server": "work", "host": None, "status": "running",
         "live": "alive", "agent": "claude", "pane_id": "%12", "cwd": "/home/me/repo", "state": "idle",
         "state_source": "screen", "evidence": {"rule": "claude.prompt", "line": "> ", "fact": None}}]
    doc = {"workspace": "/w", "registry": "/w/r", "servers": [], "sessions": sessions}
    monkeypatch.setenv("COLUMNS", "80")
    lines = status_text(doc).splitlines()
    assert lines[1].split() == ["NAME", "SERVER", "STATE", "AGENT", "WHY"], lines
    assert lines[2].startswith("nightly-job") and lines[2].endswith(failed) and len(lines[2]) <= 80, lines
    assert lines[4] == "(BACKEND, CWD, PANE, LIVE, STATUS left out to fit the terminal: `mam status --json` has them)"
    longer = failed + "; its last output: 'KeyError: model'"
    monkeypatch.setenv("COLUMNS", "80")
    cut = status_text({**doc, "sessions": [{**sessions[0], "evidence": {**sessions[0]["evidence"],
                                                                         "fact": longer}}, sessions[1]]}).splitlines()
    assert cut[1].split() == ["NAME", "SERVER", "STATE", "AGENT", "WHY"], cut  # everything else went first
    assert len(cut[2]) == 80 and cut[2].endswith("…") and failed[:30] in cut[2], cut
    monkeypatch.setenv("COLUMNS", "160")
    wide = status_text(doc).splitlines()
    assert wide[1].split() == ["NAME", "BACKEND", "SERVER", "STATUS", "LIVE", "STATE", "AGENT", "PANE", "CWD",
                              "WHY"], wide
    assert wide[2].endswith(failed) and "left out" not in "\n".join(wide)


def test_without_states_only_backend_gives_way(monkeypatch: pytest.MonkeyPatch) -> None:
    from mam.util.render import status_text

    session = {"name": "a-rather-long-agent-name", "backend": "tmux", "server": "a-long-server-name",
               "host": None, "status": "terminated", "live": "absent", "agent": "claude", "pane_id": None,
               "cwd": "/home/someone/projects/the-repo", "state": None, "state_source": None, "evidence": None}
    monkeypatch.setenv("COLUMNS", "80")
    lines = status_text({"workspace": "/w", "registry": "/w/r", "servers": [], "sessions": [session]}).splitlines()
    assert lines[1].split() == ["NAME", "SERVER", "STATUS", "LIVE", "AGENT", "PANE", "CWD"]
    assert lines[3] == "(BACKEND left out to fit the terminal: `mam status --json` has them)"
    monkeypatch.setenv("COLUMNS", "120")
    assert "BACKEND" in status_text({"workspace": "/w", "registry": "/w/r", "servers": [],
                                     "sessions": [session]}).splitlines()[1]


def _stated(name: str, rule: str | None, fact: str | None, live: str = "alive") -> dict[str, object]:
    return {"name": name, "backend": "tmux", "server": "mam-demo", "host": None, "status": "running", "live": live,
            "agent": "claude", "pane_id": "%1", "cwd": "/tmp/mam-demo-x1y2z3/workspace",
            "state": "blocked" if rule else "unknown", "state_source": "screen",
            "evidence": {"rule": rule, "line": None, "fact": fact}}


def test_at_60_columns_a_reason_loses_its_end_never_its_rule_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo at COLUMNS=60 showed WHY as `ge…eed`: cut in the middle, the rule id told nobody anything."""
    from mam.util.render import status_text

    sessions = [_stated("demo-claude", "generic.proceed", None),
                _stated("helper", "claude.footer", "no client has looked at it since its last output"),
                _stated("demo-codex", None, "no rule matches the screen")]
    monkeypatch.setenv("COLUMNS", "60")
    lines = status_text({"workspace": "/w", "registry": "/w/r", "servers": [], "sessions": sessions}).splitlines()
    last = len(lines[1].split()) - 1  # WHY, the last column, whichever columns gave way to it
    why = {line.split()[0]: line.split(None, last)[last] for line in lines[2:5]}
    assert why["demo-claude"] == "generic.proceed", lines
    assert why["helper"].startswith("claude.footer") and why["helper"].endswith("…"), lines
    assert why["demo-codex"].startswith("no rule") and why["demo-codex"].endswith("…"), lines
    assert len(why["demo-codex"]) >= len("generic.proceed"), lines


def test_an_absent_agent_says_why_in_the_table(ws: Workspace) -> None:
    """`--json` knew why (not running: its server lists no pane for it); the table showed `-`."""
    ws.write_registry('version: 1\nsessions:\n- {"name": "ghost", "backend": "herdr", "server": "srv", '
                      '"status": "running"}\n')
    ws.herdr.start("srv")
    proc = ws.mam("status", env={**ws.env, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split()[-1] == "WHY", lines
    row = next(line for line in lines if line.startswith("ghost "))
    assert "absent" in row.split() and row.endswith("not running: its server lists no live pane for it"), row


def test_reconcile_names_unconfirmed_agents_as_every_other_line_does() -> None:
    from mam.util.render import reconcile_text

    text = reconcile_text({"workspace": "/w", "registry": "/w/r.yaml", "servers": [], "drifts": [],
                           "confirmed": False, "unconfirmed": ["b1|broken", "b2|far@box"], "applied": False,
                           "written": 0})
    assert text.splitlines()[-1] == ("unconfirmed (their server could not be asked, so mam says nothing of them): "
                                     "b1 (server broken), b2 (server far on box)")
    assert "|" not in text
