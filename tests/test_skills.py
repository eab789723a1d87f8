"""The skills: SKILL.md front matter, `mam skills install`, and each script end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace

SKILLS = Path(__file__).resolve().parent.parent / "skills"
NAMES = ["multi-agent-mux-monitor", "multi-agent-mux-spawn", "multi-agent-mux-status"]


CHECKOUT = SKILLS.parent


def mam_on_path(ws: Workspace) -> Path:
    """A folder whose `mam` runs this checkout (never whichever mam happens to be installed)."""
    folder = ws.root.parent / "mam-bin"
    if not folder.exists():
        folder.mkdir()
        (folder / "mam").write_text(f'#!/bin/sh\nPYTHONPATH="{CHECKOUT}:{CHECKOUT / "backends"}" '
                                    f'exec "{sys.executable}" -m mam "$@"\n')
        (folder / "mam").chmod(0o755)
    return folder


def script(ws: Workspace, skill: str, name: str, *args: str, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    run_env = dict(env or ws.env)
    run_env["PATH"] = f"{mam_on_path(ws)}{os.pathsep}{run_env['PATH']}"
    return subprocess.run([str(ws.root / ".agents" / "skills" / skill / "scripts" / name), *args], env=run_env,
                          cwd=ws.root, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def installed(ws: Workspace) -> Workspace:
    proc = ws.mam("skills", "install")
    assert proc.returncode == 0, proc.stderr
    return ws


def test_skill_front_matter() -> None:
    assert sorted(p.name for p in SKILLS.iterdir()) == NAMES
    for name in NAMES:
        text = (SKILLS / name / "SKILL.md").read_text()
        assert text.startswith("---\n")
        meta = yaml.safe_load(text.split("---\n")[1])
        assert meta["name"] == name and len(meta["description"]) > 40


def test_shared_helpers_are_the_same_in_every_skill() -> None:
    """Each skill carries its own copy (a skill may be installed alone); they must not drift apart."""
    for helper, skills in (("common.sh", NAMES), ("confirmed.py", ["multi-agent-mux-monitor",
                                                                   "multi-agent-mux-status"])):
        texts = {(SKILLS / name / "scripts" / helper).read_text() for name in skills}
        assert len(texts) == 1, helper


def test_install_into_another_dest(ws: Workspace) -> None:
    proc = ws.mam("skills", "install", "--dest", str(ws.root / ".claude" / "skills"))
    assert proc.returncode == 0
    assert sorted(p.name for p in (ws.root / ".claude" / "skills").iterdir()) == NAMES
    assert os.access(ws.root / ".claude/skills/multi-agent-mux-spawn/scripts/spawn.sh", os.X_OK)


def test_herdr_skills_end_to_end(installed: Workspace) -> None:
    ws = installed
    env = {**ws.env, "MAM_SERVER": "team"}
    proc = script(ws, "multi-agent-mux-spawn", "spawn.sh", "coder-1", "claude", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["session"]["live"] == "alive"
    (ws.herdr.session_dir("team") / "screen-coder-1.txt").write_text("all tests pass\n")
    proc = script(ws, "multi-agent-mux-spawn", "read.sh", "coder-1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "all tests pass\n"
    status = json.loads(script(ws, "multi-agent-mux-status", "status.sh", env=env).stdout)
    assert status["sessions"][0]["live"] == "alive"
    report = json.loads(script(ws, "multi-agent-mux-monitor", "reconcile.sh", env=env).stdout)
    assert report["drifts"] == [] and report["confirmed"] is True
    proc = script(ws, "multi-agent-mux-spawn", "stop.sh", "coder-1", env=env)
    assert json.loads(proc.stdout)["status"] == "stopped"
    starts = ws.herdr.server_starts()
    assert len(starts) == 1  # only spawn started one; the query scripts never do


def test_status_script_never_starts_a_server(installed: Workspace) -> None:
    ws = installed
    ws.write_registry("sessions:\n  - {name: a, server: cold, status: running}\n")
    status = json.loads(script(ws, "multi-agent-mux-status", "status.sh").stdout)
    assert status["servers"][0]["state"] == "down"
    proc = script(ws, "multi-agent-mux-spawn", "read.sh", "a", "cold")
    assert proc.returncode == 1 and "server_not_running" in proc.stderr
    assert ws.herdr.server_starts() == []


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("chosen_by", ["MAM_BACKEND", "config"])
def test_tmux_skills_end_to_end(installed: Workspace, tmux: Tmux, chosen_by: str) -> None:
    ws = installed
    server = tmux.name()
    env = {**ws.env, "MAM_BACKEND": "tmux", "MAM_SERVER": server}
    if chosen_by == "config":  # `backend: tmux` in .mam/config.yaml, and no $MAM_BACKEND
        del env["MAM_BACKEND"]
        ws.write_config("backend: tmux\n")
    # tmux has no agent kinds of its own: spawn starts the agent's executable, here a stand-in on PATH
    bin_dir = ws.root / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text("#!/bin/sh\necho codex stand-in ready\nexec sleep 600\n")
    (bin_dir / "codex").chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = script(ws, "multi-agent-mux-spawn", "spawn.sh", "helper", "codex", env=env)
    assert proc.returncode == 0, proc.stderr
    import time
    deadline = time.monotonic() + 10
    text = ""
    while "ready" not in text and time.monotonic() < deadline:
        text = script(ws, "multi-agent-mux-spawn", "read.sh", "helper", env=env).stdout
        time.sleep(0.1)
    assert "codex stand-in ready" in text
    # the pane's blank rows below its last line are not printed (issue 33, 17: about 20 of them were)
    assert text.endswith("codex stand-in ready\n"), repr(text[-80:])
    tmux.run(server, "kill-session", "-t", "=helper")
    report = json.loads(script(ws, "multi-agent-mux-monitor", "reconcile.sh", env=env).stdout)
    assert [(d["class"], d["name"]) for d in report["drifts"]] == [("A", "helper")]
    applied = json.loads(script(ws, "multi-agent-mux-monitor", "reconcile.sh", "--apply", env=env).stdout)
    assert applied["applied"] is True
    status = json.loads(script(ws, "multi-agent-mux-status", "status.sh", env=env).stdout)
    assert status["sessions"][0]["status"] == "terminated"


# The scripts as an agent runs them, in a workspace whose config chose tmux.

NOT_CONFIRMED = 5  # what status.sh and reconcile.sh exit with when some server could not be asked


def no_backend_env(ws: Workspace) -> dict[str, str]:
    """The workspace's environment without $MAM_BACKEND (the tmux fixture sets it): config must decide."""
    return {k: v for k, v in ws.env.items() if k != "MAM_BACKEND"}


def tmux_workspace(ws: Workspace, tmux: Tmux) -> str:
    """`backend: tmux` in .mam/config.yaml, rows without `backend:`: `alpha` is live, `beta` is gone."""
    server = tmux.name()
    tmux.agent(server, "alpha")
    ws.write_config("backend: tmux\n")
    ws.write_registry(f"sessions:\n  - {{name: alpha, server: {server}, status: running}}\n"
                      f"  - {{name: beta, server: {server}, status: running}}\n")
    return server


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_status_script_follows_the_config_backend(installed: Workspace, tmux: Tmux) -> None:
    ws = installed
    server = tmux_workspace(ws, tmux)
    proc = script(ws, "multi-agent-mux-status", "status.sh", env=no_backend_env(ws))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(s["backend"], s["server"], s["state"]) for s in doc["servers"]] == [("tmux", server, "up")]
    assert [(s["name"], s["backend"], s["live"]) for s in doc["sessions"]] == [
        ("alpha", "tmux", "alive"), ("beta", "tmux", "absent")]
    assert "not confirmed" not in proc.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_reconcile_script_follows_the_config_backend(installed: Workspace, tmux: Tmux) -> None:
    ws = installed
    server = tmux_workspace(ws, tmux)
    proc = script(ws, "multi-agent-mux-monitor", "reconcile.sh", env=no_backend_env(ws))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["confirmed"] is True and report["unconfirmed"] == []
    assert [(d["class"], d["name"], d["backend"], d["server"]) for d in report["drifts"]] == [
        ("A", "beta", "tmux", server)]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_an_explicit_backend_argument_wins_over_the_config(installed: Workspace, tmux: Tmux) -> None:
    ws = installed
    tmux_workspace(ws, tmux)
    ws.herdr.set_agents("h", [])
    ws.herdr.start("h")
    ws.write_registry(ws.registry.read_text() + "  - {name: gamma, backend: herdr, server: h, status: running}\n")
    for args in (["--backend", "herdr"], ["--backend=herdr"]):
        proc = script(ws, "multi-agent-mux-status", "status.sh", *args, env=no_backend_env(ws))
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert [(s["name"], s["live"]) for s in doc["sessions"]] == [("gamma", "absent")]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_scripts_say_when_a_server_could_not_be_asked(installed: Workspace, tmux: Tmux) -> None:
    ws = installed
    server = tmux_workspace(ws, tmux)
    ws.herdr.set_fault("flaky", stdout="this is not json\n", exit=0)
    ws.write_registry(ws.registry.read_text() + "  - {name: gamma, backend: herdr, server: flaky, status: running}\n")
    env = no_backend_env(ws)
    proc = script(ws, "multi-agent-mux-status", "status.sh", env=env)
    assert proc.returncode == NOT_CONFIRMED, proc.stderr
    doc = json.loads(proc.stdout)  # the whole answer is still there
    assert {(s["server"], s["state"]) for s in doc["servers"]} == {(server, "up"), ("flaky", "unknown")}
    assert "not confirmed" in proc.stderr and "herdr server flaky" in proc.stderr
    assert "bad_output" in proc.stderr  # why it could not be asked

    proc = script(ws, "multi-agent-mux-monitor", "reconcile.sh", env=env)
    assert proc.returncode == NOT_CONFIRMED, proc.stderr
    report = json.loads(proc.stdout)
    assert report["confirmed"] is False and report["unconfirmed"] == ["gamma|flaky"]
    assert [(d["class"], d["name"]) for d in report["drifts"]] == [("A", "beta")]  # the tmux part still counts
    assert "not confirmed" in proc.stderr and "herdr server flaky" in proc.stderr and "gamma" in proc.stderr


def bin_with(tmp_path: Path, **programs: str) -> Path:
    """A PATH folder holding only bash and the given stand-ins (name -> shell script body)."""
    folder = tmp_path / "onlybash"
    folder.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    (folder / "bash").symlink_to(bash)
    for name, body in programs.items():
        (folder / name).write_text(f"#!{bash}\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


def test_without_mam_the_scripts_say_how_to_get_it(installed: Workspace, tmp_path: Path) -> None:
    ws = installed
    env = {**ws.env, "PATH": str(bin_with(tmp_path))}
    scripts: list[tuple[str, str, tuple[str, ...]]] = [
        ("multi-agent-mux-status", "status.sh", ()), ("multi-agent-mux-monitor", "reconcile.sh", ()),
        ("multi-agent-mux-spawn", "spawn.sh", ("a", "claude")), ("multi-agent-mux-spawn", "stop.sh", ("a",)),
        ("multi-agent-mux-spawn", "read.sh", ("a",))]
    for skill, name, args in scripts:
        proc = subprocess.run([str(ws.root / ".agents/skills" / skill / "scripts" / name), *args], env=env,
                              cwd=ws.root, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 127, (name, proc.stderr)
        assert "mam" in proc.stderr and "pip install" in proc.stderr, (name, proc.stderr)
        assert proc.stdout == ""


def test_without_mam_on_path_the_scripts_use_python3_m_mam(installed: Workspace, tmp_path: Path) -> None:
    ws = installed
    ws.write_registry("sessions:\n  - {name: a, server: cold, status: running}\n")
    python = bin_with(tmp_path, python3=f'exec "{sys.executable}" "$@"')
    env = {**ws.env, "PATH": os.pathsep.join([str(python), str(Path(__file__).parent / "fakes")])}
    proc = subprocess.run([str(ws.root / ".agents/skills/multi-agent-mux-status/scripts/status.sh")], env=env,
                          cwd=ws.root, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["servers"][0]["state"] == "down"


def test_every_skill_states_that_it_needs_mam() -> None:
    for name in NAMES:
        text = (SKILLS / name / "SKILL.md").read_text()
        assert "pip install" in text and "PATH" in text, name


def test_paths_in_skill_files_resolve_after_install(installed: Workspace) -> None:
    """Every relative path a SKILL.md names (`scripts/x.sh`, `../other-skill/...`) exists where it is
    installed, the skills side by side in one folder."""
    import re

    base = installed.root / ".agents" / "skills"
    seen_sibling = False
    for name in NAMES:
        text = (base / name / "SKILL.md").read_text()
        for path in re.findall(r"`((?:\.\./|scripts/)[^` ]*)", text):
            assert (base / name / path).exists(), f"{name}/SKILL.md names {path}, which is not there"
            seen_sibling = seen_sibling or path.startswith("../")
    assert seen_sibling  # the status skill points at the monitor skill


def test_install_refuses_to_overwrite_a_changed_file(ws: Workspace) -> None:
    assert ws.mam("skills", "install").returncode == 0
    base = ws.root / ".agents" / "skills"
    mine = base / "multi-agent-mux-status" / "scripts" / "status.sh"
    mine.write_text("#!/bin/sh\necho my own version\n")
    removed = base / "multi-agent-mux-monitor" / "SKILL.md"
    removed.unlink()
    outside = ws.root / "outside.txt"
    outside.write_text("keep me\n")
    link = base / "multi-agent-mux-spawn" / "scripts" / "read.sh"
    link.unlink()
    link.symlink_to(outside)

    proc = ws.mam("skills", "install")
    assert proc.returncode == 1
    assert "multi-agent-mux-status/scripts/status.sh" in proc.stderr
    assert "multi-agent-mux-spawn/scripts/read.sh" in proc.stderr
    assert "--force" in proc.stderr
    assert mine.read_text() == "#!/bin/sh\necho my own version\n"
    assert not removed.exists()  # nothing was written at all
    assert link.is_symlink()

    proc = ws.mam("skills", "install", "--force")
    assert proc.returncode == 0, proc.stderr
    assert mine.read_text() == (SKILLS / "multi-agent-mux-status" / "scripts" / "status.sh").read_text()
    assert os.access(mine, os.X_OK)
    assert removed.exists() and not link.is_symlink()
    assert outside.read_text() == "keep me\n"  # a symlink is replaced, never written through


def test_install_again_over_an_unchanged_copy_needs_no_force(installed: Workspace) -> None:
    (installed.root / ".agents/skills/multi-agent-mux-status/notes.md").write_text("my notes\n")
    proc = installed.mam("skills", "install")
    assert proc.returncode == 0, proc.stderr
    assert (installed.root / ".agents/skills/multi-agent-mux-status/notes.md").read_text() == "my notes\n"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_read_and_stop_find_a_tmux_row_with_no_config(installed: Workspace, tmux: Tmux) -> None:
    """No $MAM_BACKEND, no config (mam's default is herdr), no SERVER argument: the row says tmux and where."""
    ws = installed
    server = tmux.name()
    tmux.agent(server, "alpha", command="sh -c 'echo alpha is here; exec sleep 600'", mam=True)
    ws.write_registry(f"sessions:\n  - {{name: alpha, backend: tmux, server: {server}, status: running}}\n")
    env = {**no_backend_env(ws), "PATH": os.pathsep.join(p for p in ws.env["PATH"].split(os.pathsep)
                                                         if not (Path(p) / "herdr").exists())}
    proc = script(ws, "multi-agent-mux-spawn", "read.sh", "alpha", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "alpha is here" in proc.stdout
    proc = script(ws, "multi-agent-mux-spawn", "stop.sh", "alpha", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "stopped"
    assert tmux.run(server, "has-session", "-t", "=alpha", check=False).returncode != 0


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_read_asks_which_server_when_a_name_is_on_several(installed: Workspace, tmux: Tmux) -> None:
    ws = installed
    one, two = tmux.name(), tmux.name()
    tmux.agent(one, "alpha", command="sh -c 'echo on one; exec sleep 600'")
    tmux.agent(two, "alpha", command="sh -c 'echo on two; exec sleep 600'")
    ws.write_registry(f"sessions:\n  - {{name: alpha, backend: tmux, server: {one}, status: running}}\n"
                      f"  - {{name: alpha, backend: tmux, server: {two}, status: running}}\n")
    proc = script(ws, "multi-agent-mux-spawn", "read.sh", "alpha", env=no_backend_env(ws))
    assert proc.returncode == 2
    assert "several servers" in proc.stderr and one in proc.stderr and two in proc.stderr
    proc = script(ws, "multi-agent-mux-spawn", "read.sh", "alpha", two, env=no_backend_env(ws))
    assert proc.returncode == 0, proc.stderr
    assert "on two" in proc.stdout and "on one" not in proc.stdout


def test_spawn_script_passes_its_options_to_mam(installed: Workspace) -> None:
    ws = installed
    env = {**ws.env, "MAM_SERVER": "team", "TICKET": "MAM-22"}
    proc = script(ws, "multi-agent-mux-spawn", "spawn.sh", "--cwd", str(ws.root), "--env", "TICKET",
                  "--command=claude --model opus", "coder-2", "claude", "--", "--verbose", env=env)
    assert proc.returncode == 0, proc.stderr
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert (row["name"], row["server"], row["spec"]["cwd"], row["spec"]["env_names"]) == (
        "coder-2", "team", str(ws.root), ["TICKET"])
    assert row["spec"]["command"].startswith("claude --model opus")
    proc = script(ws, "multi-agent-mux-spawn", "spawn.sh", "--model", "opus", "coder-3", "claude", env=env)
    assert proc.returncode == 2 and "unknown option: --model" in proc.stderr


def test_every_mam_command_a_skill_names_exists(ws: Workspace) -> None:
    """A skill must never teach a command or option this mam does not have."""
    import re

    helps: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = {}

    def help_of(words: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        if words not in helps:
            helps[words] = ws.mam(*words, "--help")
        return helps[words]

    named: set[tuple[tuple[str, ...], str]] = set()
    for name in NAMES:
        text = (SKILLS / name / "SKILL.md").read_text()
        blocks = re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)
        spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M))
        for command, rest in re.findall(r"(?:^|[\s(])mam ([a-z]+)((?: [^\n]*)?)", "\n".join(blocks + spans),
                                        flags=re.M):
            words: tuple[str, ...] = (command,)
            sub = re.match(r" ([a-z]+)\b", rest)
            if sub and "Commands:" in help_of(words).stdout:  # a group: `mam hooks install`
                words = (command, sub.group(1))
            named.add((words, ""))
            named.update((words, option) for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest))
    assert {w[0] for w, _ in named} >= {"wait", "send", "restore", "stop", "hooks"}
    for words, option in sorted(named):
        assert help_of(words).returncode == 0, f"mam {' '.join(words)} is not a command"
        assert option in help_of(words).stdout, f"mam {' '.join(words)} has no {option}"
