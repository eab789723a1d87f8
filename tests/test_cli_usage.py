"""What a new user types wrong, and what the command line says back: one line, the culprit named, exit 2."""

from __future__ import annotations

import json

import pytest

from conftest import Workspace


@pytest.mark.parametrize(("argv", "culprit", "hint"), [
    (["spawn", "-L"], "No such option: -L", "run 'mam spawn --help'"),
    (["spawn", "a", "-L", "x"], "No such option: -L", "run 'mam spawn --help'"),
    (["status", "--serv", "x"], "No such option: --serv", "did you mean --server?"),
    (["--backen", "tmux", "status"], "No such option: --backen", "did you mean --backend?"),
    (["status", "--jsn"], "No such option: --jsn", "did you mean --json?"),
    (["reconcile", "--aply"], "No such option: --aply", "did you mean --apply?"),
])
def test_a_wrong_option_is_named_with_a_suggestion_and_never_abbreviated(ws: Workspace, argv: list[str],
                                                                         culprit: str, hint: str) -> None:
    proc = ws.mam(*argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"mam: {culprit}", f"hint: {hint}"]
    assert not ws.registry.exists()


@pytest.mark.parametrize("argv", [["--json", "status"], ["status", "--json"], ["--json", "version"],
                                  ["--json", "env"], ["--json", "backends"]])
def test_json_before_or_after_the_command(ws: Workspace, argv: list[str]) -> None:
    proc = ws.mam(*argv)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema"] == 1


def test_shim_install_takes_json(ws: Workspace) -> None:
    doc = json.loads(ws.mam("shim", "install", "--json").stdout)
    assert doc["dir"] == str(ws.root / ".mam" / "shim")
    assert sorted(p.rsplit("/", 1)[1] for p in doc["shims"]) == ["herdr", "tmux", "zellij"]


@pytest.mark.parametrize("argv", [["exec", "--json", "--", "ls"], ["--json", "exec", "--", "ls"]])
def test_exec_says_it_takes_no_json(ws: Workspace, argv: list[str]) -> None:
    proc = ws.mam(*argv)
    assert proc.returncode == 2
    assert "mam exec takes no --json: its output is the backend's own" in proc.stderr


def test_help_documents_the_environment(ws: Workspace) -> None:
    out = ws.mam("--help").stdout
    for var in ("MAM_TIMEOUT", "MAM_BOOTSTRAP_TIMEOUT", "MAM_DEBUG", "MAM_NO_AUTOSTART", "MAM_SERVER"):
        assert var in out
    assert "exec" in ws.mam("exec", "--help").stdout and "no --json" in ws.mam("exec", "--help").stdout


def test_exec_usage_hint_is_not_herdr_only(ws: Workspace) -> None:
    proc = ws.mam("--backend", "tmux", "exec", "--server", "s")
    assert proc.returncode == 2
    assert "tmux exec --server S -- list-sessions" in proc.stderr


def test_a_global_option_after_the_command_says_where_it_goes(ws: Workspace) -> None:
    proc = ws.mam("status", "--backend", "tmux")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["mam: No such option of mam status: --backend",
                                        "hint: --backend is mam's own option: put it before the command, "
                                        "`mam --backend ... status`"]


def test_shim_install_prints_a_hostile_dir_inert(ws: Workspace) -> None:
    folder = ws.root / "a\x1b[2Jb$(touch pwned)"
    proc = ws.mam("shim", "install", "--dir", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) == 3
    assert proc.stderr.splitlines()[-1].startswith("use them with: export PATH='")
    assert json.loads(ws.mam("shim", "install", "--json", "--dir", str(folder)).stdout)["dir"] == str(folder)


def test_a_huge_bad_name_gives_a_bounded_message(ws: Workspace) -> None:
    proc = ws.mam("stop", "a;" + "x" * 5000, "--json")
    assert proc.returncode == 2
    line = proc.stderr.splitlines()[0]
    assert line.startswith("mam: invalid agent name 'a;xxx") and len(line) < 300, len(line)
    proc = ws.mam("status", "--" + "y" * 5000)  # what no validator shortens, the error itself bounds
    assert proc.returncode == 2 and len(proc.stderr.splitlines()[0]) <= 1005


@pytest.mark.parametrize(("argv", "culprit", "hint"), [
    (["status", "--state", "bloked"], "mam: --state bloked: expected one or more of working, blocked, idle, done, "
     "unknown, separated by commas", "hint: did you mean --state blocked?"),
    (["wait", "a", "--until", "idel"], "mam: --until idel: expected one or more of working, blocked, idle, done, "
     "unknown, separated by commas", "hint: did you mean --until idle?"),
    (["prune", "--older-than", "1d"], "mam: --older-than '1d': expected a number of days, e.g. 7 or 0.5", None),
    (["prune", "--older-than", "nan"], "mam: --older-than 'nan': expected a number of days, e.g. 7 or 0.5", None),
])
def test_a_wrong_value_is_answered_in_mams_words(ws: Workspace, argv: list[str], culprit: str,
                                                hint: str | None) -> None:
    """`--older-than 1d` got click's "is not a valid float"; `--state bloked` no did-you-mean."""
    proc = ws.mam(*argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [culprit, *([hint] if hint else [])]
    assert not ws.registry.exists()
