"""Shell completion and the help, both typer's: the scripts for bash, zsh and fish, and the names mam offers
(servers for --server, agents for `stop`, `forget`, `wait`, `send`, `peek` and `attach`), read from the registry
file alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Workspace

REGISTRY = """\
version: 1
sessions:
  - {name: alpha, server: s1, status: running}
  - {name: beta, server: s2, status: stopped}
  - {name: gamma, server: t1, status: running, backend: tmux}
"""


def complete(ws: Workspace, line: str, instruction: str = "bash_complete") -> subprocess.CompletedProcess[str]:
    """Ask a real mam process what it offers for `line`, as a shell's completion script does: the words so far
    in $COMP_WORDS, the index of the word being completed in $COMP_CWORD."""
    cword = len(line.split()) - (0 if line.endswith(" ") else 1)
    env = {**ws.env, "_MAM_COMPLETE": instruction, "COMP_WORDS": line, "COMP_CWORD": str(cword)}
    return subprocess.run([sys.executable, "-m", "mam"], env=env, cwd=ws.root, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def offered(ws: Workspace, line: str, instruction: str = "bash_complete") -> list[str]:
    proc = complete(ws, line, instruction)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize("instruction", ["bash_complete", "complete_bash"])  # click's order and typer's
def test_server_names_come_from_the_registry(ws: Workspace, instruction: str) -> None:
    ws.write_registry(REGISTRY)
    assert offered(ws, "mam status --server ", instruction) == ["s1", "s2", "t1"]  # status: every backend
    assert offered(ws, "mam --backend tmux status --server ", instruction) == ["t1"]
    assert offered(ws, "mam ls --server s", instruction) == ["s1", "s2"]  # the selected backend, herdr
    assert offered(ws, "mam -b tmux spawn x --server ", instruction) == ["t1"]


def test_agent_names_for_stop_and_forget(ws: Workspace) -> None:
    ws.write_registry(REGISTRY)
    assert offered(ws, "mam stop ") == ["alpha", "beta", "gamma"]  # every backend: the row says which
    assert offered(ws, "mam stop --server s2 ") == ["beta"]
    assert offered(ws, "mam --backend tmux stop ") == ["gamma"]
    assert offered(ws, "mam forget alpha ") == ["beta", "gamma"]  # a name already on the line is not offered again
    assert offered(ws, "mam forget a") == ["alpha"]


@pytest.mark.parametrize("command", ["wait", "send", "peek", "attach"])
def test_agent_names_for_the_verbs_on_one_agent(ws: Workspace, command: str) -> None:
    ws.write_registry(REGISTRY)
    assert offered(ws, f"mam {command} ") == ["alpha", "beta", "gamma"]  # every backend: the row says which
    assert offered(ws, f"mam {command} --server t1 ") == ["gamma"]
    assert offered(ws, f"mam {command} g") == ["gamma"]


def test_commands_and_options_complete_too(ws: Workspace) -> None:
    assert offered(ws, "mam st") == ["status", "stop"]
    assert "--server" in offered(ws, "mam status --")


def test_completion_starts_nothing_and_loads_no_plugin(ws: Workspace) -> None:
    ws.write_registry(REGISTRY)
    code = ("import sys, runpy\nsys.argv = ['mam']\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)))\n")
    env = {**ws.env, "_MAM_COMPLETE": "bash_complete", "COMP_WORDS": "mam stop ", "COMP_CWORD": "2"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ws.root, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.stdout.split() == ["alpha", "beta", "gamma"]
    modules = set(proc.stderr.rsplit("MODULES ", 1)[1].split())
    assert not {"pluggy", "mam.plugin.manager", "mam_herdr", "mam_tmux", "mam.calls.runner"} & modules
    assert ws.herdr.calls() == [] and ws.herdr.server_starts() == []


@pytest.mark.parametrize("registry", ["sessions: [\n", "sessions:\n  - {name: '-L', server: s1}\n", "\x00"])
def test_a_broken_registry_offers_nothing_and_says_nothing(ws: Workspace, registry: str) -> None:
    ws.write_registry(registry)
    for line in ("mam stop ", "mam status --server "):
        proc = complete(ws, line)
        assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "", "")


def test_a_broken_config_offers_nothing_and_says_nothing(ws: Workspace) -> None:
    ws.write_registry(REGISTRY)
    ws.write_config("backend: [oops\n")
    proc = complete(ws, "mam stop ")
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "", "")


# The scripts, in real shells. A `mam` on PATH runs this checkout, as the installed command would.

SCRIPT_MARKS = {"bash": "complete -o default -F _mam_completion mam", "zsh": "#compdef mam",
                "fish": "complete --command mam"}
INSTALLED = {"bash": ".bash_completions/mam.sh", "zsh": ".zfunc/_mam", "fish": ".config/fish/completions/mam.fish"}


def in_shell(ws: Workspace, tmp_path: Path, shell: str, script: str) -> subprocess.CompletedProcess[str]:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "mam").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mam "$@"\n')
        (bin_dir / "mam").chmod(0o755)
    env = {**ws.env, "PATH": f"{bin_dir}:{ws.env['PATH']}"}
    # `; true`: the shell stays mam's parent (no exec of the last command), so typer can tell which shell it is.
    return subprocess.run([shell, "-c", f"{script}; true"], env=env, cwd=ws.root, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_the_script_of_the_shell_it_runs_in(ws: Workspace, tmp_path: Path, shell: str) -> None:
    proc = in_shell(ws, tmp_path, shell, "mam --show-completion")
    assert proc.returncode == 0, proc.stderr
    assert SCRIPT_MARKS[shell] in proc.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_install_completion_writes_the_script_under_home(ws: Workspace, tmp_path: Path, shell: str) -> None:
    proc = in_shell(ws, tmp_path, shell, "mam --install-completion")
    assert proc.returncode == 0, proc.stderr
    home = Path(ws.env["HOME"])
    assert SCRIPT_MARKS[shell] in (home / INSTALLED[shell]).read_text()
    if shell == "bash":
        assert str(home / INSTALLED["bash"]) in (home / ".bashrc").read_text()


def test_bash_completes_agent_names_through_the_shown_script(ws: Workspace, tmp_path: Path) -> None:
    ws.write_registry(REGISTRY)
    proc = in_shell(ws, tmp_path, "bash", 'source <(mam --show-completion); COMP_WORDS=(mam stop ""); COMP_CWORD=2; '
                                          '_mam_completion mam; printf "%s\\n" "${COMPREPLY[@]}"')
    assert proc.stdout.split() == ["alpha", "beta", "gamma"], proc.stderr


def test_fish_completes_server_names_through_the_shown_script(ws: Workspace, tmp_path: Path) -> None:
    ws.write_registry(REGISTRY)
    proc = in_shell(ws, tmp_path, "fish", 'mam --show-completion | source; complete -C "mam status --server "')
    assert proc.stdout.split() == ["s1", "s2", "t1"], proc.stderr


# The help is typer's, built without rich.

def test_the_help_is_typers_and_lists_completion(ws: Workspace) -> None:
    top = ws.mam("--help")
    assert top.returncode == 0
    # click 8.5 writes the optional command as [COMMAND]
    assert top.stdout.startswith(("Usage: mam [OPTIONS] COMMAND [ARGS]...", "Usage: mam [OPTIONS] [COMMAND] [ARGS]..."))
    assert "--install-completion" in top.stdout and "--show-completion" in top.stdout
    assert ws.mam("-h").stdout == top.stdout == ws.mam().stdout
    assert ws.mam("status", "--help").stdout.startswith("Usage: mam status [OPTIONS]")
    assert ws.mam("shim").stdout.startswith(("Usage: mam shim [OPTIONS] COMMAND [ARGS]...",
                                             "Usage: mam shim [OPTIONS] [COMMAND] [ARGS]..."))


def test_the_help_imports_typer_but_not_rich_or_pydantic(ws: Workspace) -> None:
    code = ("import sys, runpy\nsys.argv = ['mam', '--help']\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=ws.env, cwd=ws.root, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    modules = {m.split(".")[0] for m in proc.stderr.rsplit("MODULES ", 1)[1].split()}
    assert {"typer", "click"} <= modules
    assert not {"rich", "pydantic", "yaml", "pluggy"} & modules


# What click finds itself still reads as mam's one line and hint, exit 2, the JSON error with --json.

@pytest.mark.parametrize(("argv", "lines"), [
    (["spawn"], ["mam: Missing argument 'NAME'", "hint: run 'mam spawn --help'"]),
    (["ls", "--server"], ["mam: Option '--server' requires an argument", "hint: run 'mam ls --help'"]),
    (["reconcile", "--watch", "soon"], ["mam: Invalid value for '--watch': 'soon' is not a valid float",
                                        "hint: run 'mam reconcile --help'"]),
    (["statu"], ["mam: No such command 'statu'", "hint: did you mean status?"]),
    (["shim", "instal"], ["mam: No such command 'instal'", "hint: did you mean install?"]),
    (["stop", "a", "b"], ["mam: unexpected argument 'b'", "hint: run 'mam stop --help'"]),
    (["--json", "shim"], ["mam: mam shim alone prints its help, not a JSON document",
                          "hint: run 'mam shim --help'"]),
    (["--json"], ["mam: mam alone prints its help, not a JSON document", "hint: run 'mam --help'"]),
])
def test_usage_errors_click_finds_are_one_line_and_a_hint(ws: Workspace, argv: list[str], lines: list[str]) -> None:
    proc = ws.mam(*argv)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, lines)
    proc = ws.mam("--json", *argv) if "--json" not in argv else proc
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "usage"
