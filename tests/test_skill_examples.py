"""Every example in each skill's SKILL.md (each ```sh block), run in order against a real tmux server, as an
agent would run it: from the installed skill's folder, with `mam` on PATH being this checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

SKILLS = Path(__file__).resolve().parent.parent / "skills"
CHECKOUT = SKILLS.parent

# A stand-in for Claude Code: it asks a permission question (blocked), then shows what it was told and its
# input prompt (idle, or done when nobody looked), on a cleared screen so the question is gone.
CLAUDE = r"""#!/usr/bin/env bash
echo "claude stand-in, cwd $PWD, args $*"
echo "Do you want to proceed? [y/N]"
read -r answer
printf '\033[2J\033[H'
echo "told: $answer"
echo "❯"
exec sleep 600
"""


def examples(skill: str) -> list[str]:
    """The ```sh blocks of a SKILL.md, in order."""
    text = (SKILLS / skill / "SKILL.md").read_text()
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)


@dataclass
class Run:
    block: str
    proc: subprocess.CompletedProcess[str]


class Agentbox:
    """An installed copy of the skills, a `mam` and a `claude` on PATH, a private tmux server."""

    def __init__(self, ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
        self.ws, self.tmux, self.server = ws, tmux, tmux.name()
        assert ws.mam("skills", "install").returncode == 0
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, body in (("mam", f'#!/bin/sh\nPYTHONPATH="{CHECKOUT}:{CHECKOUT / "backends"}" '
                                   f'exec "{sys.executable}" -m mam "$@"\n'), ("claude", CLAUDE)):
            (bin_dir / name).write_text(body)
            (bin_dir / name).chmod(0o755)
        self.env = {**ws.env, "MAM_SERVER": self.server, "PROJECT_TICKET": "MAM-22",
                    "PATH": f"{bin_dir}{os.pathsep}{ws.env['PATH']}"}

    def run(self, skill: str, block: str) -> Run:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], env=self.env,
                              cwd=self.ws.root / ".agents" / "skills" / skill, capture_output=True, text=True,
                              timeout=180, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, (block, proc.stdout, proc.stderr)
        return Run(block, proc)

    def run_all(self, skill: str) -> list[Run]:
        blocks = examples(skill)
        assert blocks, f"{skill}/SKILL.md has no examples"
        return [self.run(skill, block) for block in blocks]

    def screen(self, name: str) -> str:
        return self.tmux.run(self.server, "capture-pane", "-p", "-J", "-t", f"={name}:").stdout


@pytest.fixture
def box(ws: Workspace, tmux: Tmux, tmp_path: Path) -> Agentbox:
    return Agentbox(ws, tmux, tmp_path)


def output_of(runs: list[Run], needle: str) -> str:
    found = [r.proc.stdout for r in runs if needle in r.block]
    assert found, f"no example runs {needle}"
    return found[0]


def spawn_blocked(box: Agentbox, name: str) -> None:
    """`name` started through mam, and asking its question."""
    proc = box.ws.mam("spawn", name, "--agent", "claude", "--server", box.server, env=box.env)
    assert proc.returncode == 0, proc.stderr
    proc = box.ws.mam("wait", name, "--until", "blocked", "--timeout", "60", env=box.env)
    assert proc.returncode == 0, proc.stderr


def test_status_skill_examples(box: Agentbox) -> None:
    spawn_blocked(box, "coder-1")
    runs = box.run_all("multi-agent-mux-status")
    status = json.loads(runs[0].proc.stdout)
    [row] = status["sessions"]
    assert (row["name"], row["live"], row["state"], row["evidence"]["rule"]) == (
        "coder-1", "alive", "blocked", "claude.permission")
    assert "proceed" in row["evidence"]["line"].lower()
    blocked = json.loads(output_of(runs, "--state blocked"))
    assert [s["name"] for s in blocked["sessions"]] == ["coder-1"]
    assert "proceed" in output_of(runs, "mam peek").lower()  # the question, read before it was answered
    assert "told: y" in box.screen("coder-1")  # the answer reached the agent
    sent, _, waited_text = output_of(runs, "mam send").partition("\n")
    assert sent == "sent 1 character to coder-1 and Enter"
    waited = json.loads(waited_text)
    hooks = output_of(runs, "mam hooks status")
    assert "claude" in hooks and "mam report" in hooks  # the status, then the diff install would make
    assert not (Path(box.env["HOME"]) / ".claude" / "settings.json").exists()  # a dry run writes nothing
    assert waited["reached"] is True and waited["session"]["state"] in ("idle", "done")


def test_spawn_skill_examples(box: Agentbox) -> None:
    box.env["ANTHROPIC_API_KEY"] = "sk-test-only"
    git = ["git", "-C", str(box.ws.root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "first"]):  # for the --worktree example
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    runs = box.run_all("multi-agent-mux-spawn")
    fixer = json.loads(output_of(runs, "--worktree"))
    assert fixer["worktree"]["branch"] == "mam/fixer"
    assert fixer["session"]["cwd"] == str(box.ws.root / ".mam" / "worktrees" / "fixer")
    started = json.loads(runs[0].proc.stdout)["session"]
    assert (started["name"], started["agent"], started["server"]) == ("coder-1", "claude", box.server)
    # Run from the skill's folder, as SKILL.md says, it starts the agent in the workspace root, not there.
    assert started["cwd"] == str(box.ws.root.resolve())
    assert f"cwd {box.ws.root.resolve()}" in box.screen("coder-1")
    reviewer = json.loads(output_of(runs, "--command"))["session"]
    assert (reviewer["name"], reviewer["cwd"]) == ("reviewer", "/tmp")
    assert "Do you want to proceed?" in output_of(runs, "read.sh coder-1")
    rows = {r["name"]: r for r in yaml.safe_load(box.ws.registry.read_text())["sessions"]}
    assert rows["reviewer"]["spec"]["env_names"] == ["ANTHROPIC_API_KEY"]  # restore hands it over again
    assert rows["reviewer"]["spec"]["command"].startswith("claude --model opus")
    assert json.loads(output_of(runs, "stop.sh reviewer"))["status"] == "stopped"
    sessions = {s["name"]: s for s in box.ws.mam_json("status", env=box.env)["sessions"]}
    assert (sessions["coder-1"]["live"], sessions["reviewer"]["live"]) == ("alive", "absent")


def test_monitor_skill_examples(box: Agentbox) -> None:
    spawn_blocked(box, "coder-1")
    box.tmux.run(box.server, "kill-server")  # the crash the skill recovers from
    runs = box.run_all("multi-agent-mux-monitor")
    drift = json.loads(runs[0].proc.stdout)
    assert [(d["class"], d["name"], d["action"]) for d in drift["drifts"]] == [("A", "coder-1", "mark_terminated")]
    assert json.loads(output_of(runs, "--apply"))["applied"] is True
    plan = output_of(runs, "--dry-run")
    assert "would restore" in plan and "--resume" in plan
    assert output_of(runs, "mam worktree list").strip() == "no worktree made by mam"
    status = json.loads(runs[-1].proc.stdout)
    assert [(s["name"], s["status"], s["live"]) for s in status["sessions"]] == [("coder-1", "running", "alive")]
    assert "--resume" in box.screen("coder-1")  # its conversation resumed, not a new one


def test_monitor_skill_reports_unsaved_work_in_worktrees(box: Agentbox, tmp_path: Path) -> None:
    """The monitor skill's worktree example, run as written over real worktrees: one with an uncommitted file and
    a commit pushed nowhere (no upstream), one with a commit its upstream lacks, one git cannot read."""
    env = {**box.env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": "/dev/null"}

    def git(directory: Path, *args: str) -> None:
        subprocess.run(["git", "-C", str(directory), *args], check=True, capture_output=True, timeout=30, env=env,
                       stdin=subprocess.DEVNULL)

    git(box.ws.root, "init", "-q")
    git(box.ws.root, "commit", "-q", "--allow-empty", "-m", "first")
    git(tmp_path, "init", "-q", "--bare", "origin.git")
    git(box.ws.root, "remote", "add", "origin", str(tmp_path / "origin.git"))
    for name in ("fixer", "pusher", "broken"):
        proc = box.ws.mam("spawn", name, "--agent", "claude", "--server", box.server, "--worktree", env=box.env)
        assert proc.returncode == 0, proc.stderr
    places = box.ws.root / ".mam" / "worktrees"
    git(places / "fixer", "commit", "-q", "--allow-empty", "-m", "fix")
    (places / "fixer" / "notes.txt").write_text("unsaved\n")
    git(places / "pusher", "push", "-q", "-u", "origin", "mam/pusher")
    git(places / "pusher", "commit", "-q", "--allow-empty", "-m", "not pushed")
    (places / "broken" / ".git").write_text("gitdir: /nonexistent\n")
    [block] = [b for b in examples("multi-agent-mux-monitor") if "mam worktree list" in b]
    lines = {line.split(" ", 1)[0]: line for line in box.run("multi-agent-mux-monitor", block).proc.stdout.splitlines()}
    assert lines["fixer"].endswith(": dirty, 1 uncommitted file(s), 1 commit(s) since its base, no upstream")
    assert lines["pusher"].endswith(": clean, 0 uncommitted file(s), 1 commit(s) since its base, 1 unpushed")
    assert ": unknown (" in lines["broken"] and "clean" not in lines["broken"], lines


def test_spawn_skill_finds_the_workspace_root_without_being_told(box: Agentbox) -> None:
    """No $MAM_WORKSPACE and no .mam yet: the agent and its row go to the folder that holds the installed skills'
    folder, never to the skill's own folder the example runs from."""
    del box.env["MAM_WORKSPACE"]
    shutil.rmtree(box.ws.root / ".mam", ignore_errors=True)
    run = box.run("multi-agent-mux-spawn", examples("multi-agent-mux-spawn")[0])
    root = box.ws.root.resolve()
    assert json.loads(run.proc.stdout)["session"]["cwd"] == str(root)
    assert [r["name"] for r in yaml.safe_load(box.ws.registry.read_text())["sessions"]] == ["coder-1"]
    assert not (root / ".agents" / "skills" / "multi-agent-mux-spawn" / ".mam").exists()
