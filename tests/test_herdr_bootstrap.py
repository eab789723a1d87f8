"""`mam bootstrap` on herdr: one detached, scrubbed server start, and none when it is up."""

from __future__ import annotations

import os

from conftest import Workspace

MARKERS = {
    "CLAUDECODE": "1", "CLAUDE_CODE_CHILD_SESSION": "1", "CLAUDE_CODE_SESSION_ID": "sess-123",
    "CLAUDE_CODE_MESSAGING_SOCKET": "/tmp/claude.sock", "CLAUDE_PID": "4242",
    "ANTIGRAVITY_CONVERSATION_ID": "conv-1", "HERMES_SESSION_ID": "h-1", "GROK_SESSION_ID": "g-1",
    "OPENCODE_SESSION_ID": "o-1", "TMUX": "/tmp/tmux-0/default,1,0", "HERDR_PANE_ID": "w9:p9",
}
CONFIGURATION = {"CLAUDE_CONFIG_DIR": "/home/u/.claude-work", "CLAUDE_PROJECT_DIR": "/repo",
                 "MAM_CUSTOM_SETTING": "kept"}


def test_bootstrap_scrubs_markers_and_starts_exactly_once(ws: Workspace) -> None:
    env = {**ws.env, **MARKERS, **CONFIGURATION, "WORKSPACE_ROOT": str(ws.root)}
    doc = ws.mam_json("bootstrap", "--server", "fresh", env=env)
    assert doc["started"] is True and doc["state"] == "up"
    starts = ws.herdr.server_starts()
    assert len(starts) == 1
    assert starts[0]["argv"] == ["--session", "fresh", "server"]
    server_env = starts[0]["env"]
    for name in MARKERS:
        assert name not in server_env, name
    for name, value in CONFIGURATION.items():
        assert server_env[name] == value
    assert server_env["HOME"] == env["HOME"]
    assert server_env["PATH"] == env["PATH"]
    assert server_env["WORKSPACE_ROOT"] == str(ws.root)
    assert set(doc["removed_env"]) >= set(MARKERS)
    # detached: its own session, stdin from /dev/null, output in the workspace's log
    pid = starts[0]["pid"]
    assert os.getsid(pid) == pid
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    log = ws.root / ".mam" / "logs" / "herdr-fresh.log"
    assert os.readlink(f"/proc/{pid}/fd/2") == str(log)
    assert "herdr server running" in log.read_text()
    assert ws.herdr.running("fresh")

    again = ws.mam_json("bootstrap", "--server", "fresh", env=env)
    assert again["started"] is False and again["state"] == "up"
    assert len(ws.herdr.server_starts()) == 1


def test_bootstrap_of_a_running_server_starts_nothing(ws: Workspace) -> None:
    ws.herdr.start("up-srv")
    doc = ws.mam_json("bootstrap", "--server", "up-srv")
    assert doc["started"] is False
    assert len(ws.herdr.server_starts()) == 1  # the test's own


def test_bootstrap_without_herdr_exits_3(ws: Workspace) -> None:
    proc = ws.mam("bootstrap", "--server", "x", env={**ws.env, "PATH": "/nonexistent"})
    assert proc.returncode == 3
    assert proc.stderr.startswith("mam: herdr: not found on PATH")


def test_bootstrap_refuses_to_start_when_the_probe_is_unreadable(ws: Workspace) -> None:
    ws.herdr.set_fault("default", command="session list", stdout="garbage\n", exit=0)
    proc = ws.mam("bootstrap", "--server", "x")
    assert proc.returncode == 1
    assert proc.stderr.startswith("mam: herdr server x did not come up")
    assert ws.herdr.server_starts() == []


def test_bootstrap_that_never_comes_up_exits_1_and_leaves_no_server(ws: Workspace) -> None:
    # `session list` keeps saying "not running" although the server starts
    ws.herdr.set_fault("default", command="session list",
                       stdout='{"sessions":[{"default":true,"name":"default","running":false,'
                              '"session_dir":"/x","socket_path":"/x/herdr.sock"}]}\n', exit=0)
    env = {**ws.env, "MAM_BOOTSTRAP_TIMEOUT": "1"}
    proc = ws.mam("bootstrap", "--server", "stuck", env=env)
    assert proc.returncode == 1
    assert "did not report running within 1 s" in proc.stderr
    starts = ws.herdr.server_starts()
    assert len(starts) == 1
    import time
    deadline = time.monotonic() + 5
    while ws.herdr.running("stuck") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not ws.herdr.running("stuck")


def test_env_command_explains_each_removal(ws: Workspace) -> None:
    # A workspace's keep keeps a setting it names in full (CLAUDE_CODE_MAX_OUTPUT_TOKENS), never a marker
    # (CLAUDE_CODE_ENTRYPOINT): docs/config.md, "Whose keep wins".
    ws.write_config("env:\n  scrub: [MY_AGENT_TOKEN, ACME_*]\n"
                    "  keep: [CLAUDE_CODE_MAX_OUTPUT_TOKENS, CLAUDE_CODE_ENTRYPOINT]\n")
    env = {**ws.env, **MARKERS, **CONFIGURATION, "MY_AGENT_TOKEN": "t", "ACME_RUN": "1",
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "9", "CLAUDE_CODE_ENTRYPOINT": "cli", "CLAUDE_CODE_NEW_THING": "x",
           "AGENT": "codex", "AI_AGENT": "custom"}
    doc = ws.mam_json("env", env=env)
    removed = {d["name"]: d for d in doc["removed"]}
    assert set(removed) == {*MARKERS, "MY_AGENT_TOKEN", "ACME_RUN", "CLAUDE_CODE_NEW_THING", "AGENT",
                            "CLAUDE_CODE_ENTRYPOINT"}
    assert removed["CLAUDE_CODE_ENTRYPOINT"]["not_kept_by"] == "CLAUDE_CODE_ENTRYPOINT"
    assert removed["MY_AGENT_TOKEN"]["source"].startswith("config ")
    assert removed["ACME_RUN"]["rule"] == "ACME_*"
    assert removed["CLAUDE_CODE_NEW_THING"]["rule"] == "CLAUDE_CODE_*"
    assert removed["CLAUDECODE"]["source"] == "mam defaults"
    kept = {d["name"]: d for d in doc["kept"]}
    assert kept["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]["kept_by"] == "CLAUDE_CODE_MAX_OUTPUT_TOKENS"
    assert "AI_AGENT" not in removed and "CLAUDE_CONFIG_DIR" not in removed
    text = ws.mam("env", env=env).stdout
    assert "CLAUDECODE" in text and "mam defaults" in text
    assert "sess-123" not in text  # values are never shown
