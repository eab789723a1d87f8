"""The command line: exit codes, one-line errors, JSON errors, name validation, workspace discovery."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Workspace

ROOT = Path(__file__).resolve().parent.parent

BAD_NAMES = ["-L", "--session", "a;b", "$(reboot)", "a b", "", ".hidden", "x" * 65, "a\nb", "../up"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_server_names_are_refused_before_any_process(ws: Workspace, name: str) -> None:
    for args in (["status", "--server", name], ["ls", "--server", name], ["bootstrap", "--server", name]):
        proc = ws.mam(*args, "--json")
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("mam: invalid server name")
        assert json.loads(proc.stdout)["error"]["code"] == "invalid_name"
    assert ws.herdr.calls() == []


def test_bad_backend_name_is_refused(ws: Workspace) -> None:
    proc = ws.mam("--backend", "x;y", "status")
    assert proc.returncode == 2 and proc.stderr.startswith("mam: invalid backend name")


def test_backend_short_and_attached_forms(ws: Workspace) -> None:
    assert ws.mam_json("-b", "tmux", "status")["backend"] == "tmux"
    assert ws.mam_json("--backend=tmux", "status")["backend"] == "tmux"
    proc = ws.mam("-b", "-L", "status", "--json")  # a value that looks like an option is still a value
    assert proc.returncode == 2 and proc.stderr.startswith("mam: invalid backend name '-L'"), proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "invalid_name"


def test_unknown_backend_exits_3_with_choices(ws: Workspace) -> None:
    proc = ws.mam("--backend", "nosuch", "status", "--json")
    assert proc.returncode == 3
    assert "Choose one of: herdr" in proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "backend_not_found"


def test_usage_errors_are_one_line_and_exit_2(ws: Workspace) -> None:
    proc = ws.mam("status", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == "mam: No such option: --bogus"
    assert proc.stderr.splitlines()[1] == "hint: run 'mam status --help'"  # the help of the command at fault
    assert proc.stdout == ""
    assert ws.mam("shim", "install", "--nope").stderr.splitlines()[1] == "hint: run 'mam shim install --help'"
    proc = ws.mam("nosuchcommand", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "usage"


def test_workspace_that_is_not_a_directory(ws: Workspace, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    proc = ws.mam("--workspace", str(afile), "status", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "invalid_workspace"


def test_workspace_discovery_order(ws: Workspace, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".mam").mkdir(parents=True)
    (project / "src" / "deep").mkdir(parents=True)
    env = {k: v for k, v in ws.env.items() if k != "MAM_WORKSPACE"}
    doc = json.loads(ws.mam("status", "--json", env=env, cwd=project / "src" / "deep").stdout)
    assert doc["workspace"] == str(project)
    other = tmp_path / "other"
    other.mkdir()
    doc = json.loads(ws.mam("status", "--json", env={**env, "CLAUDE_PROJECT_DIR": str(other)},
                            cwd=project / "src").stdout)
    assert doc["workspace"] == str(other)
    doc = json.loads(ws.mam("status", "--json", env={**env, "WORKSPACE_ROOT": str(project),
                                                     "CLAUDE_PROJECT_DIR": str(other)}).stdout)
    assert doc["workspace"] == str(project)
    doc = json.loads(ws.mam("--workspace", str(other), "status", "--json",
                            env={**env, "MAM_WORKSPACE": str(project)}).stdout)
    assert doc["workspace"] == str(other)


def test_invalid_config_is_exit_2(ws: Workspace) -> None:
    ws.write_config("env: [oops\n")
    proc = ws.mam("status", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "invalid_config"
    assert str(ws.root / ".mam" / "config.yaml") in proc.stderr


def test_backend_filter_and_config_default(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n"
                      "  - {name: b, server: s2, status: running, backend: other}\n")
    # A row of a backend that is not installed: the whole document, exit 3, and the reason said first.
    proc = ws.mam("status", "--json")
    assert proc.returncode == 3, proc.stderr
    assert "install the plugin of backend other" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["backend"] is None
    assert [(s["backend"], s["server"]) for s in doc["sessions"]] == [("herdr", "s1"), ("other", "s2")]
    other = next(s for s in doc["servers"] if s["backend"] == "other")
    assert other["state"] == "unknown" and other["error"]["kind"] == "not_installed"
    doc = ws.mam_json("--backend", "herdr", "status")
    assert doc["backend"] == "herdr" and [s["name"] for s in doc["sessions"]] == ["a"]
    doc = ws.mam_json("status", env={**ws.env, "MAM_BACKEND": "herdr"})
    assert doc["backend"] == "herdr"


def test_version_and_help(ws: Workspace) -> None:
    from mam import __version__

    assert ws.mam("version").stdout.strip() == f"mam {__version__}"
    assert ws.mam("--version").stdout.strip() == f"mam {__version__}"
    assert ws.mam_json("version") == {"schema": 1, "version": __version__}
    help_text = ws.mam("--help").stdout
    for command in ("status", "reconcile", "ls", "bootstrap", "backends", "env", "version"):
        assert command in help_text
    assert "--apply" in ws.mam("reconcile", "--help").stdout


def test_help_says_each_command_whole_never_cut_with_dots(ws: Workspace) -> None:
    help_text = ws.mam("--help", env={**ws.env, "COLUMNS": "80"}).stdout
    import re

    cut = [line for line in help_text.splitlines() if re.match(r"^  [a-z][a-z-]*\s{2,}.*\.\.\.$", line)]
    assert cut == []
    assert "hooks      The agents' own hooks, which tell mam their state" in help_text


def test_backends_lists_herdr_with_version(ws: Workspace) -> None:
    doc = ws.mam_json("backends")
    herdr = next(b for b in doc["backends"] if b["name"] == "herdr")
    assert herdr["found"] is True and herdr["version"] == "herdr 0.8.2" and herdr["default"] is True
    assert herdr["provider"] == "mam (built in)"
    assert ws.herdr.server_starts() == []


def test_backends_shows_the_operations_each_declares_and_leaves_out(ws: Workspace) -> None:
    doc = ws.mam_json("backends")
    tmux = next(b for b in doc["backends"] if b["name"] == "tmux")
    assert tmux["operations"] == ["spawn", "stop", "send", "capture", "client_argv", "remains"]
    assert tmux["left_out"] == ["state", "read_pane"]  # peek reads its capture; it has attach_argv
    herdr = next(b for b in doc["backends"] if b["name"] == "herdr")
    assert "remains" in herdr["left_out"] and "remains" not in herdr["operations"]
    text = ws.mam("backends").stdout.splitlines()
    head = next(i for i, line in enumerate(text) if line.split()[:3] == ["BACKEND", "OPERATIONS", "LEFT"])
    rows = {line.split()[0]: line for line in text[head + 1:] if line.strip()}
    assert "spawn, stop, send, capture, client_argv, remains" in rows["tmux"]
    assert rows["tmux"].endswith("state, read_pane")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_only_cli_imports_the_cli_framework() -> None:
    for path in [*(ROOT / "mam").rglob("*.py"), *(ROOT / "backends").rglob("*.py")]:
        if ROOT / "mam" / "cli" in path.parents:
            continue  # the CLI package is where typer and click belong
        assert not _imports(path) & {"argparse", "typer", "click", "rich"}, path


def test_core_names_no_backend() -> None:
    core = sorted((ROOT / "mam").rglob("*.py"))
    assert len(core) > 30  # the whole core, every package of it
    for path in core:
        assert not _imports(path) & {"mam_herdr", "mam_tmux", "mam_zellij"}, path


def _modules_after(args: list[str], env: dict[str, str], cwd: Path) -> set[str]:
    code = ("import sys, runpy\nsys.argv = ['mam', *" + repr(args) + "]\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    return set(proc.stderr.rsplit("MODULES ", 1)[1].split())


def test_help_loads_no_plugins_and_no_yaml(ws: Workspace) -> None:
    modules = _modules_after(["--help"], ws.env, ws.root)
    assert not {"yaml", "pluggy", "mam_herdr", "mam.registry", "importlib.metadata"} & modules


def test_an_entry_point_backend_is_found_without_importlib_metadata(ws: Workspace) -> None:
    modules = _modules_after(["--backend", "tmux", "status", "--json"], ws.env, ws.root)
    assert "mam_tmux.backend" in modules and "importlib.metadata" not in modules  # it costs 15 ms to import


def test_status_on_empty_registry_loads_no_backend_module(ws: Workspace) -> None:
    modules = _modules_after(["status", "--json"], ws.env, ws.root)
    assert "mam_herdr.backend" not in modules
    assert "importlib.metadata" not in modules
    assert "pydantic" not in modules


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from mam.util import render

    class Tty:
        def isatty(self) -> bool:
            return True

    captured = sys.stdout  # pytest's capture: not a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys, "stdout", Tty())
    assert "\x1b[32m" in render.table(("STATE",), [("up",)], colour_columns=(0,))
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in render.table(("STATE",), [("up",)], colour_columns=(0,))
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr(sys, "stdout", captured)
    assert "\x1b[" not in render.table(("STATE",), [("up",)], colour_columns=(0,))


@pytest.mark.parametrize("args", [["spawn", "a1", "--agent", "claude", "--server", "s1"],
                                  ["exec", "--server", "s1", "--", "agent", "list"],
                                  ["bootstrap", "--server", "s1"], ["ls", "--server", "s1"]])
def test_commands_that_need_the_binary_exit_3_without_it(ws: Workspace, args: list[str]) -> None:
    proc = ws.mam(*args, env={**ws.env, "PATH": "/nonexistent"})
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("mam: herdr: not found on PATH")
    assert not ws.registry.exists()  # nothing registered for an agent that could not start


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("MAM_SSH_CONFIG", "/nonexistent/ssh_config", "$MAM_SSH_CONFIG=/nonexistent/ssh_config: not a file"),
    ("MAM_SSH_ENV", "TMUX_TMPDIR", "$MAM_SSH_ENV: 'TMUX_TMPDIR' is not NAME=VALUE"),
])
def test_a_bad_ssh_setting_is_bad_input_not_an_unknown_host(ws: Workspace, variable: str, value: str,
                                                           message: str) -> None:
    """A setting of every remote call that cannot be used is the caller's mistake (exit 2, said once), not a
    host that could not be asked (exit 1, its rows left unknown)."""
    ws.write_registry("sessions:\n  - {name: far, backend: tmux, server: team, host: box, status: running}\n")
    for command in (("status",), ("reconcile",)):
        proc = ws.mam(*command, env={**ws.env, variable: value})
        assert proc.returncode == 2 and proc.stderr.startswith(f"mam: {message}"), proc.stderr


@pytest.mark.parametrize("args", [["spawn", "a1", "--command", "sleep 9", "--server", "s1"],
                                  ["exec", "--server", "s1", "--", "agent", "list"], ["ls", "--server", "s1"]])
def test_a_missing_default_backend_says_how_to_pick_tmux(ws: Workspace, args: list[str]) -> None:
    """A new user without herdr got `herdr: not found on PATH` and "choose another backend with --backend",
    with no word of which one, nor of the workspace's config."""
    proc = ws.mam(*args, env={**ws.env, "PATH": "/nonexistent"})
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines()[-1] == ("hint: install herdr, or pick another backend: `mam --backend tmux "
                                            "...`, or `backend: tmux` in .mam/config.yaml"), proc.stderr


def test_a_rows_missing_backend_is_never_swapped_for_the_default(ws: Workspace) -> None:
    """A tmux row without tmux: installing tmux is the only way to reach its agent; no hint names herdr (the
    default) or another backend for it."""
    ws.write_registry('sessions:\n- {"name": "a", "backend": "tmux", "server": "s1", "status": "running", '
                      '"agent": "claude"}\n')
    env = {**ws.env, "PATH": "/nonexistent"}
    for args in (["send", "a", "--", "hi"], ["stop", "a"], ["wait", "a", "--until", "idle", "--timeout", "1"],
                 ["status"]):
        proc = ws.mam(*args, env=env)
        assert proc.returncode == 3, (args, proc.stderr)
        assert "herdr" not in proc.stderr and "--backend" not in proc.stderr, (args, proc.stderr)
        assert "install tmux: an agent registered on backend tmux is reached only through tmux" in proc.stderr
    proc = ws.mam("restore", "a", "--dry-run", env=env)
    assert "herdr" not in proc.stderr, proc.stderr
