"""Attack and accident cases of the files mam reads and writes: the registry, `.mam/config.yaml` and the
server logs. Each is refused in one line naming the file (and line), fast, with nothing rewritten."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Tmux, Workspace

MEMORY_LIMIT = 1 << 30  # address space for one mam process: a bomb that expands cannot fit
ROW = 'version: 1\nsessions:\n- {"name": "ghost", "server": "gone", "status": "running"}\n'


def _bomb(last: str) -> str:
    """A billion-laughs document of about 550 bytes: nine levels of nine aliases, 9**8 strings in all."""
    lines = [f'l0: &l0 "{"lol" * 20}"']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n" + last


REGISTRY_BOMB = _bomb("sessions:\n  - {name: a, server: gone, status: *l8}\n")
EXTRA_BOMB = _bomb("sessions:\n  - {name: a, server: gone, status: running, extra: *l8}\n")
CONFIG_BOMB = _bomb("env:\n  scrub: *l8\n")


def _mam_limited(ws: Workspace, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """mam as a real process with its address space capped, and how long it took."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mam", *args], env=ws.env, cwd=ws.root, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, preexec_fn=limit)
    return proc, time.monotonic() - start


def _assert_refused(proc: subprocess.CompletedProcess[str], where: str, code: int = 2) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr[:500])
    assert proc.stderr.startswith(f"mam: {where}"), proc.stderr[:500]
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[:500]
    assert len(proc.stderr.splitlines()[0]) < 400, proc.stderr[:500]  # never an unbounded value


# --- item 9: aliases and anchors -------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["status"], ["reconcile", "--apply"]], ids=["status", "reconcile-apply"])
@pytest.mark.parametrize("text", [REGISTRY_BOMB, EXTRA_BOMB], ids=["status-alias", "extra-alias"])
def test_an_alias_bomb_registry_is_refused_fast_with_its_line(ws: Workspace, text: str, args: list[str]) -> None:
    assert 500 < len(text) < 600
    ws.write_registry(text)
    before = ws.registry.read_bytes()
    proc, elapsed = _mam_limited(ws, *args)
    _assert_refused(proc, f"{ws.registry}:1: ")
    assert "alias" in proc.stderr and "anchor" in proc.stderr
    assert elapsed < 5, elapsed
    assert ws.registry.read_bytes() == before
    assert ws.herdr.calls() == []  # refused before any backend process


def test_an_alias_bomb_config_is_refused_fast_with_its_line(ws: Workspace) -> None:
    assert 500 < len(CONFIG_BOMB) < 600
    ws.write_config(CONFIG_BOMB)
    proc, elapsed = _mam_limited(ws, "status")
    _assert_refused(proc, f"{ws.root / '.mam' / 'config.yaml'}:1: ")
    assert elapsed < 5, elapsed


@pytest.mark.parametrize(("text", "line"), [
    ('version: 1\nx: &x [1, 2]\nsessions:\n- {"name": "a", "server": "gone", "status": "running", "extra": *x}\n',
     2),
    ("version: 1\nowner: &me bob\nsessions:\n  - {name: a, server: gone, status: running}\n", 2),
], ids=["alias-on-valid-row", "lone-anchor"])
def test_an_anchor_or_alias_on_a_valid_row_is_refused_and_never_rewritten(ws: Workspace, text: str,
                                                                          line: int) -> None:
    ws.write_registry(text)
    before = ws.registry.read_bytes()
    for args in (["status"], ["reconcile", "--apply"]):
        proc = ws.mam(*args, "--json")
        _assert_refused(proc, f"{ws.registry}:{line}: ")
        assert json.loads(proc.stdout)["error"]["code"] == "invalid_registry"
    assert ws.registry.read_bytes() == before


@pytest.mark.parametrize(("text", "line"), [
    ("version: 1\nsessions:\n  - name: " + "a" * 200_000 + "\n    server: s\n", 3),
    ("version: 1\nsessions:\n  - name: a\n    server: [" + ", ".join(["x"] * 50_000) + "]\n", 4),
    ("version: 1\nsessions:\n  - name: a\n    server: s\n    status: {" + ", ".join(
        f"k{i}: [{'v' * 50}]" for i in range(5000)) + "}\n", 5),
    ("version: " + "9" * 5000 + "\n", 1),
], ids=["long-name", "long-list", "big-mapping", "huge-version"])
def test_a_huge_value_is_never_repeated_into_the_message(ws: Workspace, text: str, line: int) -> None:
    ws.write_registry(text)
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.registry}:{line}: ")
    assert len(proc.stderr) < 400, len(proc.stderr)


def test_a_huge_value_in_the_config_is_never_repeated_into_the_message(ws: Workspace) -> None:
    ws.write_config("backend: [" + ", ".join(["x"] * 50_000) + "]\n")
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.root / '.mam' / 'config.yaml'}:1: ")
    assert len(proc.stderr) < 400, len(proc.stderr)


@pytest.mark.parametrize("nesting", ["[" * 100_000 + "]" * 100_000, "{a: " * 50_000 + "b" + "}" * 50_000],
                         ids=["lists", "mappings"])
def test_deep_nesting_is_refused_with_its_line_not_a_crash(ws: Workspace, nesting: str) -> None:
    # The C composer recurses once per level: this used to kill mam with a segmentation fault.
    ws.write_registry("version: 1\nsessions:\n  - {name: a, server: gone, extra: " + nesting + "}\n")
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.registry}:3: nested more than")


def test_a_merge_key_is_refused(ws: Workspace) -> None:
    ws.write_registry("version: 1\nsessions:\n  - name: a\n    server: gone\n    <<: {status: running}\n")
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.registry}:5: YAML merge keys")


# --- item 10: duplicate keys -----------------------------------------------------------------------------

DUPLICATES = {
    "two sessions blocks": ("version: 1\nsessions:\n  - {name: a, server: gone, status: running}\n"
                            "sessions:\n  - {name: b, server: gone, status: running}\n", 4, "sessions"),
    "a row with two names": ("version: 1\nsessions:\n  - name: a\n    server: gone\n    status: running\n"
                             "    name: b\n", 6, "name"),
    "a json row with two names": ('version: 1\nsessions:\n- {"name": "a", "server": "gone", "status": "running",'
                                  ' "name": "b"}\n', 3, "name"),
    "a nested key": ("version: 1\nsessions:\n  - name: a\n    server: gone\n    pane:\n      cwd: /a\n"
                     "      cwd: /b\n", 7, "cwd"),
    "two versions": ("version: 1\nversion: 1\nsessions: []\n", 2, "version"),
    "an integer key written twice": ("version: 1\nsessions:\n  - {name: a, server: gone, 1: x, 0x1: y}\n", 3, "1"),
}


@pytest.mark.parametrize(("text", "line", "key"), DUPLICATES.values(), ids=list(DUPLICATES))
def test_a_duplicate_key_is_refused_with_its_line_and_never_rewritten(ws: Workspace, text: str, line: int,
                                                                      key: str) -> None:
    ws.write_registry(text)
    before = ws.registry.read_bytes()
    for args in (["status"], ["reconcile", "--apply"], ["reconcile", "--apply", "--adopt"]):
        proc = ws.mam(*args, "--json")
        _assert_refused(proc, f"{ws.registry}:{line}: duplicate key")
        assert repr(key) in proc.stderr.splitlines()[0] or key in proc.stderr.splitlines()[0]
        assert json.loads(proc.stdout)["error"]["code"] == "invalid_registry"
    assert ws.registry.read_bytes() == before
    assert ws.herdr.calls() == []


def test_the_fast_path_refuses_a_duplicate_key_in_a_json_row() -> None:
    """A guard: the fast path already refused this line because it re-encodes it; now it says why."""
    from mam.registry import text as registry_text

    assert registry_text.fast_load('version: 1\nsessions:\n- {"name": "a", "name": "a", "server": "s"}\n') is None


def test_a_duplicate_key_in_the_config_is_refused_with_its_line(ws: Workspace) -> None:
    ws.write_config("env:\n  scrub: [MY_TOKEN]\n  scrub: []\n")
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.root / '.mam' / 'config.yaml'}:3: duplicate key")


# --- item 11: symbolic links -----------------------------------------------------------------------------


def test_a_symlinked_registry_is_written_through_to_its_target(ws: Workspace, tmp_path: Path) -> None:
    """A link outside the workspace is followed once the user names it ($MAM_REGISTRY; without it, refused:
    tests/test_attacks_trust4_links.py)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "team-sessions.yaml"
    target.write_text(ROW)
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(target)
    doc = ws.mam_json("reconcile", "--apply", env={**ws.env, "MAM_REGISTRY": str(ws.registry)})
    assert doc["applied"] is True
    assert ws.registry.is_symlink() and ws.registry.resolve() == target  # the link is still the link
    assert '"status": "terminated"' in target.read_text()  # and the target holds the write
    assert (shared / "team-sessions.yaml.lock").exists()  # locked where every link to it sees the lock
    assert not (ws.registry.parent / "agent-sessions.yaml.lock").exists()
    assert [p.name for p in shared.iterdir() if p.name.endswith(".tmp")] == []


def test_a_dangling_registry_link_is_written_to_where_it_points(ws: Workspace, tmp_path: Path) -> None:
    target = tmp_path / "not-yet.yaml"
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(target)
    ws.herdr.start("live")
    proc = ws.mam("spawn", "a1", "--agent", "claude", "--server", "live",
                  env={**ws.env, "MAM_REGISTRY": str(ws.registry)})
    assert proc.returncode == 0, proc.stderr
    assert ws.registry.is_symlink() and '"name": "a1"' in target.read_text()


def test_a_registry_link_loop_is_refused(ws: Workspace) -> None:
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(ws.registry)
    ws.herdr.start("live")
    proc = ws.mam("spawn", "a1", "--agent", "claude", "--server", "live")
    _assert_refused(proc, f"{ws.registry}: cannot read: Too many levels of symbolic links")
    assert ws.registry.is_symlink()


def test_a_planted_lock_link_is_not_followed(ws: Workspace, tmp_path: Path) -> None:
    ws.write_registry(ROW)
    before = ws.registry.read_bytes()
    victim = tmp_path / "would-be-created"
    ws.registry.with_name("agent-sessions.yaml.lock").symlink_to(victim)
    proc = ws.mam("reconcile", "--apply")
    _assert_refused(proc, f"{ws.registry}.lock: cannot open the registry lock: it is a symbolic link", code=1)
    assert not victim.exists() and ws.registry.read_bytes() == before


def test_a_fifo_registry_is_refused_not_waited_on(ws: Workspace) -> None:
    ws.registry.parent.mkdir()
    os.mkfifo(ws.registry)
    proc = ws.mam("status", timeout=20)
    _assert_refused(proc, f"{ws.registry}: not a regular file")


def _bootstrap_args(backend: str) -> list[str]:
    return ["--backend", backend, "bootstrap", "--server", "s1"]


@pytest.mark.parametrize("backend", ["herdr", "zellij"])
def test_a_planted_log_symlink_is_never_followed(ws: Workspace, tmp_path: Path, backend: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    logs = ws.root / ".mam" / "logs"
    logs.mkdir(parents=True)
    (logs / f"{backend}-s1.log").symlink_to(victim)
    proc = ws.mam(*_bootstrap_args(backend), env={**ws.env, "ZELLIJ_SOCKET_DIR": str(tmp_path / "z")})
    _assert_refused(proc, f"{logs / f'{backend}-s1.log'}: ", code=1)
    assert "symbolic link" in proc.stderr
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("backend", ["herdr", "zellij"])
def test_a_symlinked_logs_folder_is_never_followed(ws: Workspace, tmp_path: Path, backend: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws.root / ".mam").mkdir()
    (ws.root / ".mam" / "logs").symlink_to(elsewhere)
    proc = ws.mam(*_bootstrap_args(backend), env={**ws.env, "ZELLIJ_SOCKET_DIR": str(tmp_path / "z")})
    _assert_refused(proc, f"{ws.root / '.mam' / 'logs'}: ", code=1)
    assert list(elsewhere.iterdir()) == []


def test_a_planted_tmux_log_symlink_is_never_followed(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    logs = ws.root / ".mam" / "logs"
    logs.mkdir(parents=True)
    (logs / f"tmux-{server}.log").symlink_to(victim)
    proc = ws.mam("bootstrap", "--server", server)
    _assert_refused(proc, f"{logs / f'tmux-{server}.log'}: ", code=1)
    assert victim.read_text() == "precious\n"


# --- item 12: smaller ------------------------------------------------------------------------------------


def test_a_non_utf8_registry_names_the_line(ws: Workspace) -> None:
    ws.write_registry("")
    ws.registry.write_bytes(b'version: 1\nsessions:\n- {"name": "a", "server": "s", "note": "caf\xe9"}\n')
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.registry}:3: ")
    assert "position" not in proc.stderr and "UTF-8" in proc.stderr


def test_a_non_utf8_config_names_the_line(ws: Workspace) -> None:
    ws.write_config("")
    (ws.root / ".mam" / "config.yaml").write_bytes(b"backend: herdr\nenv:\n  scrub: [\xff]\n")
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.root / '.mam' / 'config.yaml'}:3: ")
    assert "position" not in proc.stderr


def _without_root_powers(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    """mam run as root but without the capabilities that let root ignore file permissions, as a user is."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        prefix = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                  "--bounding-set=-dac_override,-dac_read_search"]
    return subprocess.run([*prefix, sys.executable, "-m", "mam", *args], env=ws.env, cwd=ws.root,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_a_read_only_mam_folder_with_a_lock_file_is_a_clear_error(ws: Workspace) -> None:
    ws.write_registry(ROW)
    ws.registry.with_name("agent-sessions.yaml.lock").touch()
    before = ws.registry.read_bytes()
    ws.registry.parent.chmod(0o555)
    try:
        proc = _without_root_powers(ws, "reconcile", "--apply")
    finally:
        ws.registry.parent.chmod(0o755)
    _assert_refused(proc, f"{ws.registry}: ", code=1)
    assert "ermission denied" in proc.stderr
    assert ws.registry.read_bytes() == before


def test_a_read_only_registry_is_refused_for_writing(ws: Workspace) -> None:
    ws.write_registry(ROW)
    ws.registry.chmod(0o444)
    before = ws.registry.read_bytes()
    assert ws.mam("status").returncode == 0  # reading it is fine
    proc = ws.mam("reconcile", "--apply", "--json")
    _assert_refused(proc, f"{ws.registry}: ", code=1)
    assert "read-only" in proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "operation_failed"
    assert ws.registry.read_bytes() == before
    assert ws.registry.stat().st_mode & 0o777 == 0o444


BAD_CONFIGS = {
    "env is a list": ("backend: herdr\nenv: []\n", 2),
    "env is a number": ("env: 0\n", 1),
    "env is a string": ("env: MY_TOKEN\n", 1),
    "a misspelled scrub": ("env:\n  scrubs: [MY_TOKEN]\n", 2),
    "a misspelled keep": ("env:\n  scrub: [MY_TOKEN]\n  kept: [X]\n", 3),
    "an unknown top-level key": ("backend: herdr\nscrub: [MY_TOKEN]\n", 2),
    "scrub is a string": ("env:\n  scrub: MY_TOKEN\n", 2),
    "an empty pattern": ("env:\n  scrub: ['']\n", 2),
    "a pattern that is no variable name": ("env:\n  scrub: [MY TOKEN]\n", 2),
    "backend is a number": ("backend: 7\n", 1),
}


@pytest.mark.parametrize(("text", "line"), BAD_CONFIGS.values(), ids=list(BAD_CONFIGS))
def test_a_config_mistake_is_refused_never_ignored(ws: Workspace, text: str, line: int) -> None:
    ws.write_config(text)
    proc = ws.mam("env", "--json")
    _assert_refused(proc, f"{ws.root / '.mam' / 'config.yaml'}:{line}: ")
    assert json.loads(proc.stdout)["error"]["code"] == "invalid_config"


@pytest.mark.parametrize("text", ["", "env:\n", "env: {}\n", "backend: herdr\nenv:\n  scrub: []\n  keep:\n",
                                  "env:\n  scrub: [MY_TOKEN, ACME_*]\n  keep: [CLAUDE_CODE_ENTRYPOINT]\n"])
def test_a_valid_config_still_loads(ws: Workspace, text: str) -> None:
    """A guard for the checks above: every form the README shows is still taken."""
    ws.write_config(text)
    proc = ws.mam("env")
    assert proc.returncode == 0, proc.stderr


def test_a_version_in_other_digits_is_read_as_yaml_reads_it(ws: Workspace) -> None:
    ws.write_registry("version: ²\nsessions: []\n")  # str.isdigit() is true, int() refuses it
    proc = ws.mam("status")
    _assert_refused(proc, f"{ws.registry}:1: unsupported registry version")
