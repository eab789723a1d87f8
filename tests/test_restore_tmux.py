"""`mam restore` on real tmux servers (private sockets, pinned HOME): kill the server, bring its agents back."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Tmux, Workspace

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"), pytest.mark.tmux]

# A stand-in agent: it writes one line per start (its program name, argv, directory and $MY_TOKEN), then waits.
RECORDER = """\
#!{python}
import json, os, sys, time
with open({log!r}, "a") as out:
    out.write(json.dumps({{"program": os.path.basename(sys.argv[0]), "argv": sys.argv[1:], "cwd": os.getcwd(),
                          "token": os.environ.get("MY_TOKEN")}}) + "\\n")
time.sleep(600)
"""


class Agents:
    """Stand-ins named like the agent kinds (claude, codex) and one of no kind (helper), first on PATH."""

    def __init__(self, ws: Workspace, tmp: Path) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.log = tmp / "starts.jsonl"
        for program in ("claude", "codex", "helper"):
            path = self.bin / program
            path.write_text(RECORDER.format(python=sys.executable, log=str(self.log)))
            path.chmod(0o755)
        ws.env["PATH"] = f"{self.bin}:{ws.env['PATH']}"

    def starts(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def wait_for(self, count: int) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 20
        while len(self.starts()) < count:
            assert time.monotonic() < deadline, self.starts()
            time.sleep(0.05)
        return self.starts()


@pytest.fixture
def agents(ws: Workspace, tmp_path: Path) -> Agents:
    return Agents(ws, tmp_path)


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}


def spawn(ws: Workspace, *args: str, env: dict[str, str]) -> None:
    """`mam spawn --json ARGS`: --json before the agent's own `-- ARGS`, which it would otherwise join."""
    proc = ws.mam("spawn", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr


def spawn_three(ws: Workspace, server: str, tmp_path: Path) -> dict[str, Path]:
    dirs = {name: tmp_path / f"dir-{name}" for name in ("one", "two", "three")}
    for directory in dirs.values():
        directory.mkdir()
    env = {**ws.env, "MY_TOKEN": "s3cret-v1"}
    spawn(ws, "one", "--server", server, "--agent", "claude", "--cwd", str(dirs["one"]), "--env", "MY_TOKEN", "--",
          "--session-id", "sess-1111", "--model", "opus", env=env)
    spawn(ws, "two", "--server", server, "--agent", "codex", "--cwd", str(dirs["two"]), "--", "--full-auto", env=env)
    spawn(ws, "three", "--server", server, "--command", "helper first word", "--cwd", str(dirs["three"]), "--",
          "two words", env=env)
    return dirs


def test_spawn_records_the_launch_spec_and_the_session_never_a_value(ws: Workspace, tmux: Tmux, agents: Agents,
                                                                      tmp_path: Path) -> None:
    server = tmux.name()
    dirs = spawn_three(ws, server, tmp_path)
    row = rows(ws)
    assert row["one"]["spec"] == {"kind": "claude", "args": ["--session-id", "sess-1111", "--model", "opus"],
                                  "cwd": str(dirs["one"]), "env_names": ["MY_TOKEN"]}
    assert row["one"]["agent_session"] == "sess-1111"
    assert row["three"]["spec"] == {"command": "helper first word", "args": ["two words"], "cwd": str(dirs["three"]),
                                    "env_names": []}
    assert "agent_session" not in row["two"] and "s3cret-v1" not in ws.registry.read_text()
    starts = {s["program"] + s["cwd"]: s for s in agents.wait_for(3)}
    assert starts["claude" + str(dirs["one"])]["token"] == "s3cret-v1"  # the value reached the agent


def test_kill_server_then_restore_brings_all_back_with_their_args_and_sessions(
        ws: Workspace, tmux: Tmux, agents: Agents, tmp_path: Path) -> None:
    server = tmux.name()
    dirs = spawn_three(ws, server, tmp_path)
    agents.wait_for(3)
    before = rows(ws)
    tmux.run(server, "kill-server")

    plan = ws.mam_json("restore", "--all", "--dry-run")
    assert {a["name"]: a["outcome"] for a in plan["agents"]} == dict.fromkeys(("one", "two", "three"), "would_restore")
    assert all(a["bootstrap"] and a["server_state"] == "down" for a in plan["agents"])
    assert rows(ws) == before and len(agents.starts()) == 3  # a dry run starts and writes nothing
    assert tmux.run(server, "list-sessions", check=False).returncode != 0  # not started

    doc = ws.mam_json("restore", "--all", env={**ws.env, "MY_TOKEN": "second"})
    assert doc["counts"]["restored"] == 3 and doc["counts"]["failed"] == 0
    again = {s["program"]: s for s in agents.wait_for(6)[3:]}
    assert again["claude"] == {"program": "claude", "argv": ["--model", "opus", "--resume", "sess-1111"],
                               "cwd": str(dirs["one"]), "token": "second"}
    assert again["codex"]["argv"] == ["--full-auto"] and again["codex"]["cwd"] == str(dirs["two"])
    assert again["helper"]["argv"] == ["first", "word", "two words"] and again["helper"]["cwd"] == str(dirs["three"])
    after = rows(ws)
    for name in ("one", "two", "three"):
        assert after[name]["status"] == "running" and after[name]["spec"] == before[name]["spec"]
        assert "restored_at" in after[name]
    assert after["one"]["agent_session"] == "sess-1111"
    live = {s["name"]: s["live"] for s in ws.mam_json("status")["sessions"]}
    assert live == dict.fromkeys(("one", "two", "three"), "alive")
    # The value reached the agent, never its command line.
    assert "second" not in tmux.run(server, "list-panes", "-a", "-F", "#{pane_start_command}").stdout
    assert ws.mam_json("restore", "--all")["agents"] == []  # nothing left to do: a second run starts nothing
    assert len(agents.starts()) == 6


def test_a_spec_that_no_longer_works_fails_cleanly_and_keeps_the_row(ws: Workspace, tmux: Tmux, agents: Agents,
                                                                     tmp_path: Path) -> None:
    server = tmux.name()
    dirs = spawn_three(ws, server, tmp_path)
    agents.wait_for(3)
    tmux.run(server, "kill-server")
    ws.mam_json("reconcile", "--apply")  # rows now terminated, as after any reconcile
    shutil.rmtree(dirs["two"])
    text = ws.registry.read_text()
    proc = ws.mam("restore", "two", "--json")
    assert proc.returncode == 1, proc.stderr
    entry = json.loads(proc.stdout)["agents"][0]
    assert entry["outcome"] == "failed" and "is not a directory any more" in entry["message"]
    assert ws.registry.read_text() == text  # the row, its spec and its session, exactly as they were
    assert tmux.run(server, "list-sessions", check=False).returncode != 0  # nothing to start it for
    proc = ws.mam("restore", "--all", "--json")  # the others come back; the broken one says why
    assert proc.returncode == 1
    outcomes = {a["name"]: a["outcome"] for a in json.loads(proc.stdout)["agents"]}
    assert outcomes == {"one": "restored", "two": "failed", "three": "restored"}
    assert rows(ws)["two"]["status"] == "terminated" and rows(ws)["two"]["spec"]["cwd"] == str(dirs["two"])


def test_rows_without_a_spec_and_names_that_are_running(ws: Workspace, tmux: Tmux, agents: Agents) -> None:
    server = tmux.name()
    ws.write_registry("sessions:\n"
                      f"  - {{name: old-claude, backend: tmux, server: {server}, status: terminated, agent: claude,"
                      f" pane: {{cwd: {ws.root}}}}}\n"
                      f"  - {{name: old-shell, backend: tmux, server: {server}, status: terminated, agent: sh}}\n")
    proc = ws.mam("restore", "--all", "--trust-spec", "--json")  # hand-written rows: run only with consent
    assert proc.returncode == 0  # --all passes over a row it has nothing to start from: no failure
    doc = json.loads(proc.stdout)
    by_name = {a["name"]: a for a in doc["agents"]}
    assert by_name["old-claude"]["outcome"] == "restored" and by_name["old-claude"]["argv"] == ["claude"]
    assert by_name["old-shell"]["message"] == "no launch spec: spawn it again"
    assert by_name["old-shell"]["outcome"] == "skipped" and by_name["old-shell"]["reason"] == "no_spec"
    assert ws.mam("restore", "old-shell").returncode == 1  # named, it is a failure
    assert agents.wait_for(1)[0]["cwd"] == str(ws.root)
    doc = ws.mam_json("restore", "old-claude")
    assert doc["agents"][0]["outcome"] == "running" and len(agents.starts()) == 1
    assert ws.mam("restore").returncode == 2
    assert ws.mam("restore", "nobody").returncode == 1


def test_two_concurrent_restores_start_each_agent_once(ws: Workspace, tmux: Tmux, agents: Agents,
                                                       tmp_path: Path) -> None:
    server = tmux.name()
    spawn_three(ws, server, tmp_path)
    agents.wait_for(3)
    tmux.run(server, "kill-server")
    env = {**ws.env, "MY_TOKEN": "again"}
    procs = [subprocess.Popen([sys.executable, "-m", "mam", "restore", "--all", "--json"], env=env, cwd=ws.root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (out, err)
        docs.append(json.loads(out))
    assert sum(d["counts"]["restored"] for d in docs) == 3
    agents.wait_for(6)
    time.sleep(0.5)  # a second start, were there one, would have written its line by now
    programs = sorted(s["program"] for s in agents.starts()[3:])
    assert programs == ["claude", "codex", "helper"]
    assert {r["status"] for r in rows(ws).values()} == {"running"}


def test_demo_ends_by_restoring_what_it_killed(ws: Workspace) -> None:
    proc = ws.mam("demo", timeout=120, env={**ws.env, "COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    assert "$ mam --backend tmux restore --all" in proc.stdout and ": restored" in proc.stdout
    # At 60 columns the question's rule id stays whole (it was cut to `ge…eed`).
    first = proc.stdout.split("$ mam --backend tmux status\n")[1].splitlines()
    assert first[2].startswith("demo-claude ") and first[2].split()[-1] == "generic.proceed", first
    # What the README says the demo ends with is the last thing it runs before its final status.
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    claimed = re.search(r"`mam demo` [^`.]*ends with `mam ([^`]+)`", readme)
    ran = [line.removeprefix("$ mam --backend tmux ") for line in proc.stdout.splitlines() if line.startswith("$ ")]
    assert claimed is not None and ran[-1] == "status" and ran[-2] == claimed.group(1), (ran, claimed)


def test_an_ended_agent_kept_by_a_global_remain_on_exit_does_not_hold_its_name(ws: Workspace, tmux: Tmux,
                                                                                tmp_path: Path) -> None:
    """With `remain-on-exit on` in the user's tmux.conf, an agent that ended leaves a session of dead panes. It
    is no agent (status says absent), and it must not hold the name against restore or a new spawn. A session
    mam did not make, or one where anything still runs, is never closed."""
    conf = tmp_path / "tmux.conf"
    conf.write_text("set -g remain-on-exit on\n")
    env = {**ws.env, "MAM_TMUX_CONFIG": str(conf)}
    server, done = tmux.name(), tmp_path / "done"
    ended = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    for name in ("gone", "again", "mixed"):
        spawn(ws, name, "--server", server, "--command", sys.executable, "--", "-c", ended, env=env)
    tmux.run(server, "new-session", "-d", "-s", "mine", "true")  # the user's own, kept dead by the option
    done.touch()
    deadline = time.monotonic() + 20
    while {s["live"] for s in ws.mam_json("status", env=env)["sessions"]} != {"absent"}:
        assert time.monotonic() < deadline, "the agents never ended"
        time.sleep(0.1)
    remains = set(tmux.run(server, "list-panes", "-a", "-F", "#{session_name} #{pane_dead}").stdout.split("\n"))
    assert {"gone 1", "again 1", "mixed 1", "mine 1"} <= remains  # tmux kept every dead pane
    tmux.run(server, "split-window", "-d", "-t", "=mixed:", "sleep 600")  # something runs there again
    done.unlink()
    doc = ws.mam_json("restore", "gone", env=env)
    assert [a["outcome"] for a in doc["agents"]] == ["restored"], doc
    assert ws.mam_json("reconcile", "--apply", env=env)["written"] == 2  # again and mixed: terminated
    spawn(ws, "again", "--server", server, "--command", sys.executable, "--", "-c", ended, env=env)
    live = {s["name"]: s["live"] for s in ws.mam_json("status", env=env)["sessions"]}
    assert live == {"gone": "alive", "again": "alive", "mixed": "absent"}
    for name in ("mixed", "mine"):
        proc = ws.mam("spawn", name, "--server", server, "--command", "sleep 600", env=env)
        assert proc.returncode != 0 and "duplicate session" in proc.stderr, proc.stderr
    sessions = tmux.run(server, "list-panes", "-a", "-F", "#{session_name} #{pane_dead}").stdout.split("\n")
    assert {"mixed 0", "mixed 1", "mine 1"} <= set(sessions)  # left as they were
