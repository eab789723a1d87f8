"""Codex's lifecycle hooks (~/.codex/hooks.json) beside its `notify`: install merges, uninstall takes out mam's only,
status says the feature switch and the trust recorded in config.toml; and `mam report` reads the event an agent
writes on its stdin, within its bounds."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from conftest import Workspace

# A user's own hooks.json (Codex's shape: Claude Code's), written by hand.
HOOKS = """{
  "hooks": {
    "Stop": [
      {"hooks": [{"type": "command", "command": "notify-send 'Codex is done'", "timeout": 5}]}
    ],
    "PreToolUse": [
      {"matcher": "^Bash$", "hooks": [{"type": "command", "command": "python3 ~/guard.py"}]}
    ]
  }
}
"""
CONFIG = """model = "gpt-5-codex"

[features]
hooks = false
"""
EXPECTED = {"SessionStart": "idle", "UserPromptSubmit": "working", "PostToolUse": "working",
            "PermissionRequest": "blocked", "Stop": "idle"}


def codex(ws: Workspace) -> Path:
    folder = Path(ws.env["HOME"]) / ".codex"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def ours(text: str) -> dict[str, str]:
    data = json.loads(text)
    return {event: h["command"].split()[-1] for event, groups in data["hooks"].items() for g in groups
            for h in g["hooks"] if h["command"].startswith("mam report ")}


def codex_status(ws: Workspace) -> list[dict[str, object]]:
    return list(ws.mam_json("hooks", "status", "--agent", "codex")["hooks"])


def test_install_merges_hooks_json_keeps_notify_and_uninstall_restores_it(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"
    hooks.write_text(HOOKS)
    hooks.chmod(0o600)
    before = hooks.read_bytes()
    proc = ws.mam("hooks", "install", "--agent", "codex")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ours(hooks.read_text()) == EXPECTED
    data = json.loads(hooks.read_text())
    own = json.loads(HOOKS)["hooks"]
    assert data["hooks"]["Stop"][0] == own["Stop"][0] and data["hooks"]["PreToolUse"] == own["PreToolUse"]
    assert all(len(g["hooks"]) == 1 for groups in data["hooks"].values() for g in groups)  # own groups
    assert "notify" in (folder / "config.toml").read_text()  # the notify is kept beside
    backup = folder / "hooks.json.mam-backup"
    assert backup.read_bytes() == before
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600 == stat.S_IMODE(hooks.stat().st_mode)
    assert [s["state"] for s in codex_status(ws)] == ["installed", "installed"]
    again = ws.mam("hooks", "install", "--agent", "codex")
    assert again.returncode == 0 and again.stdout.count("already installed") == 2
    # The user adds a hook of their own after the install: uninstall keeps it.
    data["hooks"]["PostToolUse"].insert(0, {"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]})
    hooks.write_text(json.dumps(data, indent=2) + "\n")
    assert ws.mam("hooks", "uninstall", "--agent", "codex").returncode == 0
    left = json.loads(hooks.read_text())
    assert ours(hooks.read_text()) == {}
    assert left["hooks"]["PostToolUse"] == [{"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]}]
    assert left["hooks"]["Stop"] == own["Stop"] and left["hooks"]["PreToolUse"] == own["PreToolUse"]
    assert not (folder / "config.toml").exists()  # mam made it: gone again


def test_install_then_uninstall_is_byte_for_byte(ws: Workspace) -> None:
    folder = codex(ws)
    (folder / "hooks.json").write_text(HOOKS)
    (folder / "config.toml").write_text(CONFIG)
    assert ws.mam("hooks", "install").returncode == 0  # no --agent: ~/.codex is there
    assert ws.mam("hooks", "uninstall", "--agent", "codex").returncode == 0
    assert (folder / "hooks.json").read_text() == HOOKS and (folder / "config.toml").read_text() == CONFIG
    assert not (folder / "hooks.json.mam-backup").exists()


def test_dry_run_shows_the_hooks_json_diff_and_writes_nothing(ws: Workspace) -> None:
    folder = codex(ws)
    (folder / "hooks.json").write_text(HOOKS)
    proc = ws.mam("hooks", "install", "--agent", "codex", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert '"PermissionRequest": [' in proc.stdout and '"command": "mam report blocked"' in proc.stdout
    assert f"+++ {folder / 'hooks.json'}" in proc.stdout
    assert (folder / "hooks.json").read_text() == HOOKS and not (folder / "config.toml").exists()
    assert not (folder / "hooks.json.mam-backup").exists()


def test_an_unparsable_hooks_json_is_refused_in_one_line(ws: Workspace) -> None:
    folder = codex(ws)
    broken = b'{"hooks": {"Stop": [}\n'
    (folder / "hooks.json").write_bytes(broken)
    proc = ws.mam("hooks", "install", "--agent", "codex")
    assert proc.returncode == 1
    refused = [line for line in proc.stdout.splitlines() if "hooks.json" in line]
    assert len(refused) == 1 and "cannot parse" in refused[0]
    assert (folder / "hooks.json").read_bytes() == broken and not (folder / "hooks.json.mam-backup").exists()
    assert "notify" in (folder / "config.toml").read_text()  # the other file went on
    for shape in (b'[1, 2]\n', b'{"hooks": {"Stop": {"hooks": []}}}\n'):
        (folder / "hooks.json").write_bytes(shape)
        assert ws.mam("hooks", "install", "--agent", "codex").returncode == 1
        assert (folder / "hooks.json").read_bytes() == shape
    assert codex_status(ws)[1]["state"] == "unreadable"


def test_status_reports_the_feature_switch_and_never_turns_it_on(ws: Workspace) -> None:
    folder = codex(ws)
    (folder / "config.toml").write_text(CONFIG)
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    toml = (folder / "config.toml").read_text()
    assert toml.endswith(CONFIG) and "hooks = false" in toml  # untouched but for notify's two lines
    entry = codex_status(ws)[1]
    assert entry["details"] == {"feature": "off", "trusted": 0, "disabled": 0, "of": 5}
    assert "switched off" in str(entry["message"])
    text = ws.mam("hooks", "status", "--agent", "codex").stdout
    assert "codex: installed; Codex's hooks are switched off" in text and text.count("hooks.json") == 1
    (folder / "config.toml").write_text(toml.replace("hooks = false", "codex_hooks = true"))
    assert codex_status(ws)[1]["details"]["feature"] == "on"  # type: ignore[index]
    (folder / "config.toml").write_text(toml.replace("[features]\nhooks = false\n", ""))
    assert codex_status(ws)[1]["details"]["feature"] == "default"  # type: ignore[index]


def test_status_reads_the_trust_recorded_in_config_toml(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"
    hooks.write_text(HOOKS)
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    # mam's Stop group comes after the user's (index 1); its others are alone in their event (index 0).
    key = f"{hooks}"
    trust = (f'\n[hooks.state."{key}:stop:1:0"]\ntrusted_hash = "sha256:aa"\n'
             f'[hooks.state."{key}:permission_request:0:0"]\ntrusted_hash = "sha256:bb"\nenabled = false\n'
             f'[hooks.state."{key}:stop:0:0"]\ntrusted_hash = "sha256:the-users-own"\n'
             f'[hooks.state."/elsewhere/hooks.json:session_start:0:0"]\ntrusted_hash = "sha256:cc"\n')
    with open(folder / "config.toml", "a") as handle:
        handle.write(trust)
    entry = codex_status(ws)[1]
    assert entry["details"] == {"feature": "default", "trusted": 2, "disabled": 1, "of": 5}
    assert "trust recorded in config.toml for 2 of mam's 5" in str(entry["message"])
    assert "1 disabled" in str(entry["message"])


def report(ws: Workspace, stdin: bytes | None, *, hold: bool = False) -> tuple[subprocess.CompletedProcess[bytes],
                                                                              float]:
    """`mam report idle` as an agent's hook: `stdin` written on a pipe (None: /dev/null), which is kept open until
    it exits when `hold`. The process and how long it took."""
    env = {**{k: v for k, v in ws.env.items() if k != "TMUX_PANE"}, "MAM_AGENT": "fixer"}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "mam", "report", "idle"], env=env, cwd=ws.root,
                            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)  # blocks past the pipe's buffer unless mam reads it
        proc.stdin.flush()
        if hold:
            proc.wait(timeout=10)
        proc.stdin.close()
        proc.stdin = None
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - start


def test_report_reads_its_stdin_to_the_end(ws: Workspace) -> None:
    event = json.dumps({"hook_event_name": "Stop", "pad": "x" * 2_000_000}).encode()  # far past a pipe's buffer
    proc, _ = report(ws, event)
    assert proc.returncode == 0 and proc.stderr == b""
    assert json.loads((ws.root / ".mam" / "reports" / "fixer.json").read_text())["state"] == "idle"
    proc, _ = report(ws, None)  # nothing on stdin
    assert proc.returncode == 0


def test_report_drain_is_bounded(ws: Workspace, tmp_path: Path) -> None:
    from mam.hooks.report import drain

    # A stdin held open and silent: it stops after the idle time (0.5 s), having written the report first.
    proc, took = report(ws, b'{"hook_event_name": "Stop"}', hold=True)
    assert proc.returncode == 0 and 0.5 <= took < 5, took
    assert (ws.root / ".mam" / "reports" / "fixer.json").exists()
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, b"abc")
        start = time.monotonic()
        assert drain(read_fd, idle=0.2) == 3
        assert 0.15 <= time.monotonic() - start < 5  # room for a loaded machine; the idle time ends it
        os.write(write_fd, b"x" * 1000)
        assert drain(read_fd, limit=100, idle=0.2) == 100  # the size bound
    finally:
        os.close(read_fd)
        os.close(write_fd)
    big = tmp_path / "big"
    big.write_bytes(b"y" * 5000)
    with open(big, "rb") as handle:
        assert drain(handle.fileno()) == 5000  # a file: to its end, no wait
    assert drain(999) == 0  # no such descriptor


def test_a_hooks_json_that_is_no_regular_file_or_not_utf8_is_refused_in_one_line(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"
    plants = {"fifo": lambda: os.mkfifo(hooks), "folder": hooks.mkdir,
              "not UTF-8": lambda: hooks.write_bytes(b'\xff{"hooks": {}}\n'),
              "huge": lambda: hooks.write_bytes(b" " * (5 * 1024 * 1024))}
    for name, plant in plants.items():
        plant()
        for command in (["install"], ["uninstall"], ["status"]):
            proc = ws.mam("hooks", *command, "--agent", "codex")
            assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, (name, proc.stderr)
            said = [line for line in proc.stdout.splitlines() if "hooks.json" in line]
            assert len(said) == 1 and proc.returncode == (0 if command == ["status"] else 1), (name, proc.stdout)
        assert codex_status(ws)[1]["state"] == "unreadable", name
        assert not (folder / "hooks.json.mam-backup").exists(), name
        if hooks.is_dir():
            hooks.rmdir()
        else:
            hooks.unlink()


def test_a_linked_codex_home_or_a_backup_in_the_way_is_refused_per_file(ws: Workspace) -> None:
    real = Path(ws.env["HOME"]) / "dotfiles-codex"
    real.mkdir()
    (real / "hooks.json").write_text(HOOKS)
    linked = Path(ws.env["HOME"]) / "codex-link"
    linked.symlink_to(real)
    (Path(ws.env["HOME"]) / ".claude").mkdir()
    for args in (["install"], ["install", "--dry-run"], ["uninstall"]):
        proc = ws.mam("hooks", *args, env={**ws.env, "CODEX_HOME": str(linked)})
        assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
        assert proc.stdout.count("symbolic link") == 2, proc.stdout  # config.toml and hooks.json, each
        assert sorted(p.name for p in real.iterdir()) == ["hooks.json"] and (real / "hooks.json").read_text() == HOOKS
        if args == ["install"]:  # the other kinds went on
            assert (Path(ws.env["HOME"]) / ".claude" / "settings.json").exists()
    # A backup mam cannot write (a folder in its place): that file is refused, the other goes on.
    folder = codex(ws)
    (folder / "hooks.json").write_text(HOOKS)
    (folder / "hooks.json.mam-backup").mkdir()
    proc = ws.mam("hooks", "install", "--agent", "codex")
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    assert (folder / "hooks.json").read_text() == HOOKS and "notify" in (folder / "config.toml").read_text()
    # A backup mam cannot read (a FIFO) does not hold uninstall: it works from the file itself.
    (folder / "hooks.json.mam-backup").rmdir()
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    (folder / "hooks.json.mam-backup").unlink()
    os.mkfifo(folder / "hooks.json.mam-backup")
    proc = ws.mam("hooks", "uninstall", "--agent", "codex")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((folder / "hooks.json").read_text()) == json.loads(HOOKS)


def test_a_hooks_json_mam_could_not_write_back_as_it_was_is_refused(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"
    # Duplicate keys (the first would be dropped in silence); an escaped lone surrogate (not writable as UTF-8).
    for text in ('{"hooks": {"Stop": []}, "hooks": {"Stop": [{"hooks": []}]}}\n', '{"title": "\\ud800"}\n',
                 '{"hooks": {"Stop": [{"hooks": [], "hooks": []}]}}\n'):
        hooks.write_text(text)
        proc = ws.mam("hooks", "install", "--agent", "codex")
        assert proc.returncode == 1 and "internal error" not in proc.stderr, (text, proc.stderr)
        assert [line for line in proc.stdout.splitlines() if "hooks.json" in line][0].count("cannot parse") == 1
        assert hooks.read_text() == text and not (folder / "hooks.json.mam-backup").exists(), text
        assert codex_status(ws)[1]["state"] == "unreadable"


def test_install_then_uninstall_keeps_an_empty_file_the_user_had(ws: Workspace) -> None:
    folder = codex(ws)
    for hooks_text, toml_text in (("{}\n", ""), ('{\n  "hooks": {}\n}\n', "\n# nothing yet\n")):
        (folder / "hooks.json").write_text(hooks_text)
        (folder / "config.toml").write_text(toml_text)
        assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
        proc = ws.mam("hooks", "uninstall", "--agent", "codex")
        assert proc.returncode == 0, proc.stdout
        assert (folder / "hooks.json").read_text() == hooks_text and (folder / "config.toml").read_text() == toml_text
        assert sorted(p.name for p in folder.iterdir()) == ["config.toml", "hooks.json"]


def test_entries_that_only_look_like_mams_are_the_users(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"

    def group(*commands: str, **more: str) -> dict[str, object]:
        return {**more, "hooks": [{"type": "command", "command": c} for c in commands]}

    # The user's own: mam by a path, another matcher, an event mam does not use, two handlers, another type.
    own = {"PostToolUse": [group("/opt/mine/mam report working", matcher="Edit")],
           "PreToolUse": [group("mam report blocked")],
           "Stop": [group("mam report idle", "mam report done"),
                    {"hooks": [{"type": "prompt", "command": "mam report idle"}]}]}
    copies = [group("mam report idle")] * 3  # mam's own Stop group, three times over: one of its five entries
    hooks.write_text(json.dumps({"hooks": {**own, "Stop": own["Stop"] + copies}}, indent=2) + "\n")
    entry = codex_status(ws)[1]
    assert entry["state"] == "partial" and str(entry["message"]).startswith("1 of mam's 5"), entry
    assert entry["details"]["of"] == 3  # type: ignore[index]
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    data = json.loads(hooks.read_text())["hooks"]
    assert data["Stop"] == own["Stop"] + [group("mam report idle")]  # each of mam's once, the user's kept
    assert data["PostToolUse"] == own["PostToolUse"] + [group("mam report working")]
    assert ws.mam("hooks", "uninstall", "--agent", "codex").returncode == 0
    assert json.loads(hooks.read_text()) == {"hooks": own}


def test_install_never_makes_a_file_too_large_for_mam_to_read_back(ws: Workspace) -> None:
    from mam.hooks.common import MAX_FILE

    folder = codex(ws)
    hooks = folder / "hooks.json"
    head = '{"hooks": {}, "pad": "'
    text = head + "x" * (MAX_FILE - len(head) - 3) + '"}\n'  # just under the bound: read, but no room for mam's
    hooks.write_text(text)
    proc = ws.mam("hooks", "install", "--agent", "codex")
    assert proc.returncode == 1 and "too large" in proc.stdout, proc.stdout
    assert hooks.read_text() == text and not (folder / "hooks.json.mam-backup").exists()


def test_a_feature_switch_that_is_not_true_or_false_is_said(ws: Workspace) -> None:
    folder = codex(ws)
    (folder / "hooks.json").write_text(HOOKS)
    forms = {'[features]\nhooks = "false"\n': "invalid", "features.hooks = false\n": "off",
             "features = { hooks = true }\n": "on", "features = 1\n": "invalid",
             '[features]\nhooks = 0\ncodex_hooks = true\n': "invalid", "[features]\ncodex_hooks = false\n": "off"}
    for text, word in forms.items():
        (folder / "config.toml").write_text(text)
        entry = codex_status(ws)[1]
        assert entry["details"]["feature"] == word, (text, entry)  # type: ignore[index]
        if word == "invalid":
            assert "not true or false" in str(entry["message"]) and "default applies" not in str(entry["message"])


def test_a_hooks_json_with_crlf_line_ends_keeps_them(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"
    crlf = HOOKS.replace("\n", "\r\n").encode()
    hooks.write_bytes(crlf)
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    installed = hooks.read_bytes()
    assert installed.count(b"\n") == installed.count(b"\r\n") > 10 and b"mam report idle" in installed
    assert ws.mam("hooks", "uninstall", "--agent", "codex").returncode == 0
    assert hooks.read_bytes() == crlf


def test_json_numbers_mam_would_write_back_as_no_json_are_refused(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"
    for text in ('{"limit": NaN}\n', '{"limit": -Infinity}\n', '{"limit": 1e400}\n'):
        hooks.write_text(text)
        proc = ws.mam("hooks", "install", "--agent", "codex")
        assert proc.returncode == 1 and "cannot parse" in proc.stdout, (text, proc.stdout)
        assert hooks.read_text() == text


def test_a_config_toml_with_crlf_line_ends_gets_mams_lines_in_crlf(ws: Workspace) -> None:
    folder = codex(ws)
    crlf = CONFIG.replace("\n", "\r\n").encode()
    (folder / "config.toml").write_bytes(crlf)
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    installed = (folder / "config.toml").read_bytes()
    assert installed.endswith(crlf) and installed.count(b"\n") == installed.count(b"\r\n")
    assert ws.mam_json("hooks", "status", "--agent", "codex")["hooks"][0]["state"] == "installed"
    (folder / "config.toml.mam-backup").unlink()  # from the file itself
    assert ws.mam("hooks", "uninstall", "--agent", "codex").returncode == 0
    assert (folder / "config.toml").read_bytes() == crlf


def test_without_home_codex_home_still_serves_and_the_others_say_why(ws: Workspace) -> None:
    folder = Path(ws.env["HOME"]) / "codex-home"
    folder.mkdir()
    env = {**{k: v for k, v in ws.env.items() if k != "HOME"}, "CODEX_HOME": str(folder)}
    proc = ws.mam("hooks", "install", env=env)
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stdout + proc.stderr
    assert "codex: " + str(folder / "hooks.json") + ": added" in proc.stdout, proc.stdout
    assert "claude: $HOME is not set" in proc.stdout and (folder / "hooks.json").exists()
    proc = ws.mam("hooks", "status", env=env)
    assert proc.returncode == 0 and "claude: unreadable: $HOME is not set" in proc.stdout, proc.stdout + proc.stderr
    assert "codex: installed" in proc.stdout


def test_nothing_is_written_through_a_linked_hooks_json_or_backup(ws: Workspace) -> None:
    folder = codex(ws)
    target = Path(ws.env["HOME"]) / "elsewhere.json"
    target.write_text(HOOKS)
    (folder / "hooks.json").symlink_to(target)
    for args in (["install"], ["install", "--dry-run"], ["uninstall"]):
        proc = ws.mam("hooks", *args, "--agent", "codex")
        assert proc.returncode == 1 and "symbolic link" in proc.stdout and "Traceback" not in proc.stderr
        assert target.read_text() == HOOKS and (folder / "hooks.json").is_symlink()
    # A backup that is a link is replaced by the backup, never written through.
    (folder / "hooks.json").unlink()
    (folder / "hooks.json").write_text(HOOKS.replace("guard.py", "guard2.py"))
    (folder / "hooks.json.mam-backup").symlink_to(target)
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    assert target.read_text() == HOOKS and not (folder / "hooks.json.mam-backup").is_symlink()


def test_report_returns_on_an_endless_or_trickling_stdin(ws: Workspace) -> None:
    import threading

    from mam.hooks.report import drain

    env = {**{k: v for k, v in ws.env.items() if k != "TMUX_PANE"}, "MAM_AGENT": "fixer"}
    with open("/dev/zero", "rb") as zero:  # endless: stops at its size bound
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "mam", "report", "idle"], env=env, cwd=ws.root, stdin=zero,
                              capture_output=True, timeout=30)
    assert proc.returncode == 0 and time.monotonic() - start < 5, proc.stderr
    read_fd, write_fd = os.pipe()
    stop = threading.Event()

    def trickle() -> None:  # a byte every 0.05 s, never silent for the idle time
        while not stop.wait(0.05):
            os.write(write_fd, b"x")

    writer = threading.Thread(target=trickle)
    writer.start()
    try:
        start = time.monotonic()
        assert drain(read_fd, idle=0.5, total=0.6) > 0
        assert time.monotonic() - start < 5  # the total bound (0.6 s), however slowly it writes; room for load
    finally:
        stop.set()
        writer.join(timeout=5)
        os.close(read_fd)
        os.close(write_fd)


def test_uninstall_says_when_it_moves_the_users_groups_whose_trust_codex_keys_by_place(ws: Workspace) -> None:
    folder = codex(ws)
    hooks = folder / "hooks.json"
    hooks.write_text(HOOKS)
    assert ws.mam("hooks", "install", "--agent", "codex").returncode == 0
    proc = ws.mam("hooks", "uninstall", "--agent", "codex", "--dry-run")
    assert "moved" not in proc.stdout  # mam's groups are last: nothing of the user's moves
    data = json.loads(hooks.read_text())
    data["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "say done"}]})  # after mam's
    hooks.write_text(json.dumps(data, indent=2) + "\n")
    proc = ws.mam("hooks", "uninstall", "--agent", "codex")
    assert proc.returncode == 0
    line = [line for line in proc.stdout.splitlines() if "hooks.json" in line][0]
    assert "1 of the user's groups moved" in line and "trust" in line, line
    assert json.loads(hooks.read_text())["hooks"]["Stop"][1]["hooks"][0]["command"] == "say done"


def test_a_users_own_notify_is_named_in_one_short_line(ws: Workspace) -> None:
    folder = codex(ws)
    (folder / "config.toml").write_text(f'notify = ["{"x" * 5000}", "\\n[bad]"]\n')
    proc = ws.mam("hooks", "install", "--agent", "codex")
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if "config.toml" in x)
    assert "already has notify" in line and len(line) < 400 + len(str(folder)), line
