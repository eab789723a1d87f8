"""mam on herdr as herdr's source makes it behave (issue 19): the fake herdr is as hard as the program, and each
test here failed on the code before this fix."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from conftest import FAKES, Workspace


def _row(ws: Workspace, name: str) -> dict[str, object]:
    rows = yaml.safe_load(ws.registry.read_text())["sessions"]
    return next(r for r in rows if r["name"] == name)


def _typed(ws: Workspace, server: str, pane: str) -> str:
    path = ws.herdr.session_dir(server) / f"typed-{pane.replace(':', '_')}.txt"
    return path.read_text() if path.exists() else ""


# -- 1. send-text types exactly the text -------------------------------------------------------------------


@pytest.mark.parametrize("text", ["fix it", "-- fix it", "--", "--session", "--session=other", "--remote=host",
                                  "--remote", "--remote-keybindings=server", "--handoff", "--machine=m", "-h"])
def test_send_types_exactly_the_text_even_one_herdr_would_take_for_its_option(ws: Workspace, text: str) -> None:
    ws.mam_json("spawn", "coder", "--agent", "claude", "--server", "team")
    proc = ws.mam("send", "coder", "--enter", "--", text)
    assert proc.returncode == 0, proc.stderr
    assert _typed(ws, "team", "w1:p1") == text + "<Enter>"  # never `-- TEXT`, never a word lost to --session
    assert not ws.herdr.running("other")


def test_the_fake_types_a_dash_dash_after_the_pane_as_herdr_does(ws: Workspace) -> None:
    import subprocess

    ws.herdr.start("team")
    ws.herdr.set_agents("team", [{"name": "a", "agent": "claude", "agent_status": "idle", "pane_id": "w1:p1",
                                  "tab_id": "w1:t1", "workspace_id": "w1", "terminal_id": "term_1",
                                  "focused": False, "revision": 0, "state_change_seq": 0}])
    herdr = str(FAKES / "herdr")
    run = subprocess.run([herdr, "--session", "team", "pane", "send-text", "w1:p1", "--", "a", "b"], env=ws.env,
                         capture_output=True, text=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
    assert _typed(ws, "team", "w1:p1") == "-- a b"
    # without `--`, a text word `--session=x` is herdr's option: the text is gone (usage error, exit 2)
    run = subprocess.run([herdr, "--session", "team", "pane", "send-text", "w1:p1", "--session=x"], env=ws.env,
                         capture_output=True, text=True)
    assert run.returncode == 2 and "usage: herdr pane send-text" in run.stderr


# -- 2. agent start blocks until ready, and fails in herdr's own ways -------------------------------------------


def test_agent_start_waits_herdrs_own_settle_delay_and_passes_its_timeout(ws: Workspace) -> None:
    ws.herdr.quick_starts(None)  # herdr's 3 s
    began = time.monotonic()
    doc = ws.mam_json("spawn", "coder", "--agent", "claude", "--server", "team",
                      env={**ws.env, "MAM_HERDR_START_TIMEOUT": "45"})
    assert time.monotonic() - began >= 3  # a floor, never a speed measurement
    assert doc["session"]["status"] == "running"
    start = next(c["argv"] for c in ws.herdr.calls() if c["argv"][2:4] == ["agent", "start"])
    assert start[start.index("--timeout") + 1] == "45000"


def test_a_start_slower_than_mams_call_limit_is_not_failed(ws: Workspace) -> None:
    """MAM_TIMEOUT (5 s here) is every call's limit; herdr's agent start gets its own on top of it."""
    ws.herdr.set_start("team", settle=0.3, ready_after=6)
    doc = ws.mam_json("spawn", "coder", "--agent", "claude", "--server", "team")
    assert doc["session"]["status"] == "running" and doc["session"]["live"] == "alive"


def test_a_start_herdr_timed_out_stays_starting_and_reconcile_settles_it(ws: Workspace) -> None:
    ws.herdr.set_start("team", settle=0.3, outcome="never")
    env = {**ws.env, "MAM_HERDR_START_TIMEOUT": "3.5"}
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team", env=env)
    assert proc.returncode == 1 and "herdr did not see coder ready within 3.5 s" in proc.stderr, proc.stderr
    assert "herdr timeout" in proc.stderr and "stays registered as starting" in proc.stderr
    assert _row(ws, "coder")["status"] == "starting"  # never recorded as failed
    doc = ws.mam_json("reconcile", "--apply")  # herdr cleared the pending name: it is gone
    assert [(d["name"], d["class"]) for d in doc["drifts"]] == [("coder", "A")]
    assert _row(ws, "coder")["status"] == "terminated"


def test_a_starting_row_whose_agent_shows_up_is_settled_running(ws: Workspace) -> None:
    ws.herdr.set_start("team", settle=0.3, ready_after=5.5)
    env = {**ws.env, "MAM_HERDR_START_TIMEOUT": "4", "MAM_TIMEOUT": "1"}  # mam gives up at 5 s, herdr at 4
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team", env=env)
    assert proc.returncode == 1 and _row(ws, "coder")["status"] == "starting"
    ws.herdr.set_agents("team", [{"name": "coder", "agent": "claude", "agent_status": "idle", "pane_id": "w1:p1",
                                  "tab_id": "w1:t1", "workspace_id": "w1", "terminal_id": "term_1",
                                  "focused": False, "revision": 0, "state_change_seq": 0}])
    doc = ws.mam_json("reconcile", "--apply")
    assert [(d["name"], d["class"]) for d in doc["drifts"]] == [("coder", "C")]
    assert _row(ws, "coder")["status"] == "running"


def test_an_agent_at_a_startup_dialog_is_running_and_blocked(ws: Workspace) -> None:
    ws.herdr.set_start("team", settle=0.3, outcome="blocked")
    doc = ws.mam_json("spawn", "coder", "--agent", "claude", "--server", "team")
    assert doc["session"]["status"] == "running"
    status = ws.mam_json("status")
    assert [(s["name"], s["status"], s["state"]) for s in status["sessions"]] == [("coder", "running", "blocked")]


def test_a_program_that_exits_during_its_start_is_herdrs_timeout(ws: Workspace) -> None:
    """herdr 0.8.2 drops the name of an agent whose program exits while it starts, and its `agent start` waits out
    its --timeout (`timeout`, never `agent_start_failed`, seen on the real one): mam says so, unsettled."""
    ws.herdr.set_start("team", settle=0.3, outcome="exited")
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team",
                  env={**ws.env, "MAM_HERDR_START_TIMEOUT": "4"})
    assert proc.returncode == 1 and "herdr did not see coder ready within 4 s" in proc.stderr, proc.stderr
    assert _row(ws, "coder")["status"] == "starting"


@pytest.mark.parametrize(("outcome", "meaning"), [
    ("mismatch", "herdr found another kind of agent in its pane"),
])
def test_a_start_herdr_says_failed_is_terminated_with_its_meaning(ws: Workspace, outcome: str, meaning: str) -> None:
    ws.herdr.set_start("team", settle=0.3, outcome=outcome)
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team")
    assert proc.returncode == 1 and meaning in proc.stderr, proc.stderr
    assert _row(ws, "coder")["status"] == "terminated"
    closes = [c["argv"] for c in ws.herdr.calls() if c["argv"][2:4] == ["pane", "close"]]
    # a pane left with only its shell is closed; one where another agent runs is left to the user
    assert closes == ([["--session", "team", "pane", "close", "w1:p1"]] if outcome == "exited" else [])


def test_a_bad_start_timeout_is_refused_before_anything(ws: Workspace) -> None:
    for value in ("3", "301", "x"):
        proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team",
                      env={**ws.env, "MAM_HERDR_START_TIMEOUT": value})
        assert proc.returncode == 2 and "MAM_HERDR_START_TIMEOUT" in proc.stderr
    assert ws.herdr.calls() == [] and not ws.registry.exists()


# -- 3. a restarted herdr server resumes its agents itself ----------------------------------------------------


def test_restore_does_not_start_a_second_copy_of_an_agent_herdr_resumed(ws: Workspace) -> None:
    ws.mam_json("spawn", "coder", "--agent", "codex", "--server", "team")
    listed = json.loads((ws.herdr.session_dir("team") / "agents.json").read_text())
    listed[0]["agent_session"] = {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "019a-1"}
    (ws.herdr.session_dir("team") / "agents.json").write_text(json.dumps(listed))
    ws.mam_json("spawn", "plain", "--agent", "codex", "--server", "team")  # reports no session: not resumed
    ws.herdr.stop("team")
    doc = ws.mam_json("restore", "--all")
    outcomes = {a["name"]: (a["outcome"], a["message"]) for a in doc["agents"]}
    assert outcomes["coder"][0] == "running" and "its server brought it back" in outcomes["coder"][1]
    assert outcomes["plain"][0] == "restored"
    starts = [c["argv"][4] for c in ws.herdr.calls() if c["argv"][2:4] == ["agent", "start"]]
    assert starts == ["coder", "plain", "plain"]  # coder once only
    assert _row(ws, "coder")["status"] == "running"


def test_a_server_with_resume_off_brings_back_no_agent(ws: Workspace) -> None:
    (ws.herdr.root / "config.toml").write_text("[session]\nresume_agents_on_restore = false\n")
    ws.mam_json("spawn", "coder", "--agent", "codex", "--server", "team")
    listed = json.loads((ws.herdr.session_dir("team") / "agents.json").read_text())
    listed[0]["agent_session"] = {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": "019a-1"}
    (ws.herdr.session_dir("team") / "agents.json").write_text(json.dumps(listed))
    ws.herdr.stop("team")
    doc = ws.mam_json("restore", "--all")
    assert [(a["name"], a["outcome"]) for a in doc["agents"]] == [("coder", "restored")]


# -- 4. smaller differences ------------------------------------------------------------------------------------


def _listed(name: str, pane: str, **extra: object) -> dict[str, object]:
    return {"name": name, "agent": "claude", "agent_status": "idle", "pane_id": pane, "tab_id": "w1:t1",
            "workspace_id": "w1", "terminal_id": "term_1", "focused": False, "revision": 0, "state_change_seq": 0,
            **extra}


def test_herdr_checks_the_name_before_the_pane_and_mam_says_what_each_refusal_means(ws: Workspace) -> None:
    from mam.api import CallContext, SpawnRequest
    from mam_herdr.backend import HerdrBackend

    ws.herdr.start("team")
    ws.herdr.set_agents("team", [_listed("coder", "w1:p1", cwd="/src")])
    herdr = str(FAKES / "herdr")
    import subprocess

    taken = subprocess.run([herdr, "--session", "team", "agent", "start", "coder", "--kind", "claude", "--pane",
                            "w9:p9"], env=ws.env, capture_output=True, text=True)
    error = json.loads(taken.stderr)
    assert taken.returncode == 1 and error["error"]["code"] == "agent_name_taken"  # before the missing pane
    assert "candidates: terminal_id=term_1 pane_id=w1:p1 workspace_id=w1 tab_id=w1:t1 cwd=/src status=Idle" in \
        error["error"]["message"]
    missing = subprocess.run([herdr, "--session", "team", "agent", "start", "other", "--kind", "claude", "--pane",
                              "w9:p9"], env=ws.env, capture_output=True, text=True)
    assert json.loads(missing.stderr)["error"] == {"code": "agent_pane_not_found",
                                                   "message": "agent target pane w9:p9 not found"}
    ctx = CallContext(timeout=5, env=ws.env)
    result = HerdrBackend().spawn("team", SpawnRequest("coder", "claude", str(ws.root), ("claude",)), ctx)
    assert not result.ok and not result.unsettled
    assert "herdr already has an agent of that name" in result.message


def test_herdr_refuses_c1_control_characters_in_agent_arguments(ws: Workspace) -> None:
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team", "--", "a\u0085b")
    assert proc.returncode == 1 and "herdr cannot type its arguments safely" in proc.stderr, proc.stderr
    assert _row(ws, "coder")["status"] == "terminated"


def test_the_fake_normalises_kinds_as_herdr_does(ws: Workspace) -> None:
    import subprocess

    ws.herdr.start("team")
    herdr = str(FAKES / "herdr")
    made = subprocess.run([herdr, "--session", "team", "workspace", "create", "--no-focus"], env=ws.env,
                          capture_output=True, text=True, check=True)
    pane = json.loads(made.stdout)["result"]["root_pane"]["pane_id"]
    started = subprocess.run([herdr, "--session", "team", "agent", "start", "g", "--kind", "Antigravity", "--pane",
                              pane], env=ws.env, capture_output=True, text=True)
    result = json.loads(started.stdout)["result"]
    assert (result["agent"]["agent"], result["argv"]) == ("agy", ["agy"])
    assert result["agent"]["interactive_ready"] is True
    bad = subprocess.run([herdr, "--session", "team", "agent", "start", "h", "--kind", "nosuch", "--pane", pane],
                         env=ws.env, capture_output=True, text=True)
    assert (bad.returncode, bad.stderr) == (2, "unsupported interactive agent kind: nosuch\n")


def test_mam_ignores_the_agent_keys_it_does_not_know(ws: Workspace) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: coder, backend: herdr, server: team, status: running}\n")
    ws.herdr.start("team")
    ws.herdr.set_agents("team", [_listed("coder", "w1:p1", interactive_ready=True, launch_pending=True,
                                         title="Claude Code", display_agent="Claude", terminal_title="✳ x",
                                         terminal_title_stripped="x", foreground_cwd="/src",
                                         screen_detection_skipped=True, state_labels={"a": "b"},
                                         tokens={"t": "1"}, some_key_of_a_later_herdr={"x": [1]})])
    doc = ws.mam_json("status")
    assert [(s["name"], s["live"], s["state"]) for s in doc["sessions"]] == [("coder", "alive", "idle")]


def test_panes_get_herdrs_terminal_and_the_default_session_no_herdr_session(ws: Workspace, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\nenv > \"$PWD/env-$HERDR_PANE_ID.txt\"\n")
    (bin_dir / "claude").chmod(0o755)
    env = {**ws.env, "PATH": f"{bin_dir}{os.pathsep}{ws.env['PATH']}", "TERM": "dumb", "HERDR_SESSION": "x"}
    for session in ("team", "default"):
        subprocess.Popen([str(FAKES / "herdr"), "--session", session, "server"], env=env, start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not ws.herdr.running(session):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        made = subprocess.run([str(FAKES / "herdr"), "--session", session, "workspace", "create", "--cwd",
                               str(tmp_path)], env=env, capture_output=True, text=True, check=True)
        pane = json.loads(made.stdout)["result"]["root_pane"]["pane_id"]
        subprocess.run([str(FAKES / "herdr"), "--session", session, "agent", "start", "a", "--kind", "claude",
                        "--pane", pane], env=env, capture_output=True, text=True)
        path = tmp_path / f"env-{pane}.txt"
        deadline = time.monotonic() + 10
        while not path.exists() or not path.read_text().endswith("\n"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        seen = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        path.unlink()
        assert (seen["TERM"], seen["COLORTERM"]) == ("xterm-256color", "truecolor")
        assert seen.get("HERDR_SESSION") == (session if session != "default" else None)
    ws.herdr.stop("team")
    ws.herdr.stop("default")


def test_session_list_without_json_is_a_table(ws: Workspace) -> None:
    import subprocess

    ws.herdr.start("team")
    table = subprocess.run([str(FAKES / "herdr"), "session", "list"], env=ws.env, capture_output=True, text=True)
    lines = table.stdout.splitlines()
    assert table.returncode == 0 and lines[0].split() == ["name", "status", "directory", "socket"]
    assert lines[1].split()[:2] == ["default", "stopped"] and lines[2].split()[:2] == ["team", "running"]


# -- 5. herdr 0.9 and the versions mam supports -----------------------------------------------------------------


@pytest.mark.parametrize(("client", "server", "words"), [
    ("0.9.0", "0.8.2", ("herdr 0.9 (protocol 22)", "herdr 0.8.2 (protocol 20)")),
    ("0.8.2", "0.9.1", ("herdr 0.8.2 (protocol 20)", "herdr 0.9 (protocol 22)")),
])
def test_a_protocol_mismatch_is_unknown_and_names_both_versions(ws: Workspace, client: str, server: str,
                                                                 words: tuple[str, str]) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: coder, backend: herdr, server: team, status: running}\n")
    ws.herdr.start("team", env={**ws.env, "FAKE_HERDR_VERSION": server})
    ws.herdr.set_agents("team", [_listed("coder", "w1:p1")])
    doc = ws.mam_json("status", env={**ws.env, "FAKE_HERDR_VERSION": client})
    (entry,) = doc["servers"]
    assert entry["state"] == "unknown" and entry["error"]["kind"] == "protocol_mismatch"  # never down
    assert f"the herdr on PATH is {words[0]} and the server runs {words[1]}" in entry["error"]["message"]


def test_backends_shows_the_herdr_version_and_whether_mam_supports_it(ws: Workspace) -> None:
    doc = ws.mam_json("backends")
    herdr = next(b for b in doc["backends"] if b["name"] == "herdr")
    assert (herdr["version"], herdr["supported"]) == ("herdr 0.8.2", True)
    text = ws.mam("backends", env={**ws.env, "COLUMNS": "200"}).stdout
    assert "SUPPORTED" in text.splitlines()[0]
    assert any(line.split()[1:2] == ["herdr"] or "herdr 0.8.2  yes" in line for line in text.splitlines())
    doc = ws.mam_json("backends", env={**ws.env, "FAKE_HERDR_VERSION": "0.9.1"})
    herdr = next(b for b in doc["backends"] if b["name"] == "herdr")
    assert (herdr["version"], herdr["supported"]) == ("herdr 0.9.1", False)
