"""The SSH transport: which hosts reach ssh, what the remote side receives, and whose failure it was."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import Sshd

from mam.calls import runner
from mam.calls.transport import SshTransport, remote_command, split_host
from mam.plugin.records import CommandResult, ErrorKind
from mam.util.errors import MamError
from mam.util.names import LOCAL, check_host

PRINT_ARGV = ["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"]
HOSTILE_WORDS = ["a b", "it's", 'say "hi"', "a;b", "$(touch /tmp/mam-pwned)", "`id`", "x\ny", "#{pane_id}",
                 "#(id)", "-V", "--", "", "*", "~", "a\\b", "\t", "é", "%C", "${HOME}", "!!", "'", "a=b"]


@pytest.mark.parametrize("host", [
    "-oProxyCommand=x", "-p", "-", "a b", "h\n", "h\t", "`", "`id`", "$(x)", "h;id", "h|x", "h&", "'h'", "h\x1b[2J",
    " ", "ssh://h", "h/x", "h%C", "user@-h", "@h", "u@", "h:0", "h:99999", "h:", "h:x", "~h", "h\x00",
])
def test_check_host_refuses_what_ssh_could_read_otherwise(host: str) -> None:
    with pytest.raises(MamError) as caught:
        check_host(host)
    assert caught.value.code == "usage" and caught.value.exit_code == 2
    assert "\n" not in caught.value.message and caught.value.message.startswith("invalid host ")


def test_check_host_names_the_option_problem() -> None:
    with pytest.raises(MamError, match="begins with '-'"):
        check_host("-oProxyCommand=touch /tmp/x")


@pytest.mark.parametrize(("host", "dest", "port"), [
    ("h", "h", None), ("user@h.example", "user@h.example", None), ("h:2222", "h", 2222),
    ("u@h:22", "u@h", 22), ("alias_x", "alias_x", None), ("10.0.0.1:7", "10.0.0.1", 7), ("::1", "::1", None),
    ("[::1]:2200", "::1", 2200), ("u@[fe80::1]", "u@fe80::1", None),
])
def test_accepted_hosts_map_to_a_destination_and_port(host: str, dest: str, port: int | None) -> None:
    assert check_host(host) == host
    assert split_host(host) == (dest, port)


@pytest.mark.parametrize("host", ["", "local"])
def test_empty_and_local_mean_this_machine(host: str) -> None:
    assert check_host(host) == LOCAL
    with pytest.raises(ValueError):
        split_host(host)
    with pytest.raises(ValueError):
        SshTransport(host, Path("/tmp"), 5)


@pytest.fixture
def control() -> Iterator[Path]:
    """A short private folder for the ControlPath sockets (pytest's own tmp paths are too long for them)."""
    folder = Path(tempfile.mkdtemp(prefix="mc", dir="/tmp")) / "ssh"
    try:
        yield folder
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def test_wrap_puts_the_destination_after_double_dash_and_one_command_string(control: Path) -> None:
    transport = SshTransport("u@h:2222", control, 5)
    argv = transport.wrap(["tmux", "-L", "a b", "ls"], env_unset=["TMUX"], env_set={"TMUX_TMPDIR": "/t x"})
    dash = argv.index("--")
    assert argv[dash + 1:] == ["u@h", "env -u TMUX -- 'TMUX_TMPDIR=/t x' tmux -L 'a b' ls"]
    options = argv[:dash]
    assert options[0] == "ssh" and options[options.index("-p") + 1] == "2222"
    assert f"ControlPath={control}/%C" in options and "BatchMode=yes" in options
    assert "ControlMaster=auto" in options and "-T" in options
    assert control.is_dir() and control.stat().st_mode & 0o777 == 0o700


def test_remote_command_refuses_what_it_cannot_pass() -> None:
    for argv, kwargs in ((["-V"], {}), (["tmux"], {"env_unset": ["A*B*"]}), (["tmux"], {"env_unset": ["*"]}),
                         (["a=b"], {"env_unset": ["X"]}), (["x\0"], {}), ([], {}),
                         (["tmux"], {"env_unset": ["A B"]}), (["tmux"], {"env_set": {"X;": "1"}})):
        with pytest.raises(ValueError):
            remote_command(argv, **kwargs)


def test_control_folder_planted_as_a_link_is_refused(control: Path) -> None:
    control.parent.joinpath("elsewhere").mkdir(mode=0o700)
    control.symlink_to(control.parent / "elsewhere")
    with pytest.raises(MamError, match="symbolic link"):
        SshTransport("h", control, 5).wrap(["true"])


def test_control_folder_open_to_others_is_refused(control: Path) -> None:
    control.mkdir(mode=0o755)
    control.chmod(0o755)
    with pytest.raises(MamError, match="nobody else") as caught:
        SshTransport("h", control, 5).wrap(["true"])
    assert caught.value.code == "operation_failed"


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_control_folder_of_another_user_is_refused(control: Path) -> None:
    control.mkdir(mode=0o700)
    os.chown(control, 65534, 65534)
    with pytest.raises(MamError, match="nobody else"):
        SshTransport("h", control, 5).wrap(["true"])


def test_a_folder_too_long_for_a_socket_path_falls_back_to_a_short_private_one(
        control: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = control.parent / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    deep = control.parent / ("d" * 60) / ".mam" / "ssh"
    deep.parent.mkdir(parents=True)
    argv = SshTransport("h", deep, 5).wrap(["true"])
    assert f"ControlPath={runtime}/mam-ssh/%C" in argv
    assert (runtime / "mam-ssh").stat().st_mode & 0o777 == 0o700 and not deep.exists()


def test_only_ssh_s_own_last_words_are_ssh_failures() -> None:
    transport = SshTransport("box", Path("/tmp"), 5)
    assert transport.classify_ssh(255, "tmux: lost server\n") is None  # the remote command's own 255
    assert transport.classify_ssh(1, "u@h: Permission denied (publickey).\n") is None  # ssh exits 255
    assert transport.classify_ssh(255, "error connecting to /tmp/x (Permission denied)\n") is None
    noise = "ControlSocket /tmp/s/0a1c already exists, disabling multiplexing\n"
    assert transport.classify_ssh(255, "lost server\n" + noise) is None  # the remote command's own
    assert transport.clean(CommandResult(("ssh",), 1, "", noise + "no server running\n")).stderr == \
        "no server running\n"
    too_long = 'unix_listener: path "/tmp/x/0a1c.5tcZ" too long for Unix domain socket\n'
    assert (transport.classify_ssh(255, too_long) or (None,))[0] is ErrorKind.UNKNOWN
    found = transport.classify_ssh(255, "Permission denied (publickey,password).\nrest\n")
    assert found is None  # ssh's message is not the last line: the remote side wrote after it
    kind, message = transport.classify_ssh(255, "root@h: Permission denied (publickey).\n") or (None, "")
    assert kind is ErrorKind.PERMISSION and message.startswith("ssh to box: login refused")
    missing = transport.classify(CommandResult(("ssh",), None, not_found=True))
    assert missing is not None and missing.kind is ErrorKind.UNKNOWN and "not installed" in missing.message


# --- against the real sshd -------------------------------------------------------------------------------------

def _remote(sshd: Sshd, control: Path, argv: list[str], host: str | None = None, config: Path | None = None,
            env: dict[str, str] | None = None, **wrap: object) -> CommandResult:
    transport = SshTransport(host or sshd.host, control, 10, ssh_config=config or sshd.config_path)
    return runner.run(transport.wrap(argv, **wrap), timeout=30, env=env or sshd.env)  # type: ignore[arg-type]


@pytest.fixture
def masters(sshd: Sshd, control: Path) -> Iterator[Path]:
    try:
        yield control
    finally:
        sshd.close_masters(control)


def test_hostile_arguments_reach_the_remote_side_byte_for_byte(sshd: Sshd, masters: Path) -> None:
    result = _remote(sshd, masters, [*PRINT_ARGV, *HOSTILE_WORDS])
    assert result.returncode == 0, result
    assert json.loads(result.stdout) == HOSTILE_WORDS
    # the same through the sh loop that unsets prefixes, and env's assignments
    wrapped = _remote(sshd, masters, [*PRINT_ARGV, *HOSTILE_WORDS], env_unset=["TMUX", "HERDR_*"],
                      env_set={"MAM_X": "$(id)"})
    assert wrapped.returncode == 0, wrapped
    assert json.loads(wrapped.stdout) == HOSTILE_WORDS
    assert not Path("/tmp/mam-pwned").exists()


def test_markers_of_the_caller_never_reach_the_remote_side(sshd: Sshd, masters: Path, tmp_path: Path) -> None:
    # A user config that asks ssh to send the markers: the server accepts none, and env -u removes them anyway.
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    SendEnv TMUX HERDR_* LANG\n" + sshd.config_path.read_text())
    env = {**sshd.env, "TMUX": "/x,1,0", "HERDR_ENV": "1"}
    show = ["python3", "-c", "import os, json; print(json.dumps(sorted(os.environ)))"]
    plain = json.loads(_remote(sshd, masters, show, config=config, env=env).stdout)
    assert "TMUX" not in plain and "HERDR_ENV" not in plain
    assert {"SSH_CONNECTION", "SSH_CLIENT", "HOME"} <= set(plain)  # what sshd itself sets there
    # Unsetting works on the remote side, by name and by prefix (the scrub's PREFIX_* rules).
    scrubbed = _remote(sshd, masters, show, config=config, env=env,
                       env_unset=["SSH_CONNECTION", "SSH_CLI*", "TMUX", "HERDR_*"], env_set={"MAM_MARK": "a b"})
    names = set(json.loads(scrubbed.stdout))
    assert not names & {"SSH_CONNECTION", "SSH_CLIENT", "TMUX", "HERDR_ENV"}
    assert {"MAM_MARK", "HOME"} <= names


def test_a_stopped_sshd_is_connection_refused(sshd: Sshd, control: Path) -> None:
    sshd.stop()
    try:
        result = _remote(sshd, control, ["true"])
    finally:
        sshd.start()
    transport = SshTransport(sshd.host, control, 10)
    kind, message = transport.classify_ssh(result.returncode, result.stderr) or (None, "")
    assert kind is ErrorKind.UNKNOWN and message.startswith("ssh to mam-test: connection refused"), result


def test_a_key_the_server_does_not_know_is_a_refused_login(sshd: Sshd, control: Path) -> None:
    result = _remote(sshd, control, ["true"], config=sshd.wrong_key)
    error = SshTransport(sshd.host, control, 10).classify(result)
    assert error is not None and error.kind is ErrorKind.PERMISSION, result
    assert error.message.startswith("ssh to mam-test: login refused")


def test_a_changed_host_key_is_refused(sshd: Sshd, control: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    other = (sshd.root / "wrong_ed25519.pub").read_text().split()  # any key that is not the server's
    known.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    config = tmp_path / "ssh_config"
    config.write_text(sshd.config_path.read_text().replace(str(sshd.root / "known_hosts"), str(known)))
    result = _remote(sshd, control, ["true"], config=config)
    error = SshTransport(sshd.host, control, 10).classify(result)
    assert error is not None and error.kind is ErrorKind.PERMISSION, result
    assert error.message.startswith("ssh to mam-test: its host key changed"), error


def test_an_unknown_host_name_is_an_ssh_failure(sshd: Sshd, control: Path) -> None:
    host = f"mam-{uuid.uuid4().hex[:8]}.invalid"
    result = _remote(sshd, control, ["true"], host=host)
    error = SshTransport(host, control, 10).classify(result)
    assert error is not None and error.kind is ErrorKind.UNKNOWN, result
    assert error.message.startswith(f"ssh to {host}: unknown host name")


def test_a_remote_command_s_own_exit_255_is_left_to_the_backend(sshd: Sshd, masters: Path) -> None:
    result = _remote(sshd, masters, ["sh", "-c", "echo 'no server running on /tmp/x' >&2; exit 255"])
    assert result.returncode == 255
    assert SshTransport(sshd.host, masters, 10).classify(result) is None
    assert result.stderr == "no server running on /tmp/x\n"  # nothing of ssh's own mixed in


def _master_pid(sshd: Sshd, transport: SshTransport) -> str | None:
    check = subprocess.run(transport.control_argv("check"), env=sshd.env, capture_output=True, text=True,
                           timeout=30, stdin=subprocess.DEVNULL)
    found = re.search(r"Master running \(pid=(\d+)\)", check.stderr)
    return found[1] if check.returncode == 0 and found else None


def test_calls_share_one_connection(sshd: Sshd, masters: Path) -> None:
    transport = SshTransport(sshd.host, masters, 10, ssh_config=sshd.config_path)
    assert _master_pid(sshd, transport) is None
    assert _remote(sshd, masters, ["true"]).returncode == 0
    first = _master_pid(sshd, transport)
    assert first is not None
    assert _remote(sshd, masters, ["true"]).returncode == 0
    assert _master_pid(sshd, transport) == first


def test_a_tmux_round_trip_on_a_private_socket(sshd: Sshd, masters: Path, tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    tmpdir = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))  # short: tmux's socket path has the same limit
    server = f"mam-test-{uuid.uuid4().hex[:8]}"
    remote_env = {"TMUX_TMPDIR": str(tmpdir), "HOME": str(tmp_path)}
    scrub = ["TMUX", "TMUX_PANE"]

    def tmux(*args: str) -> CommandResult:
        return _remote(sshd, masters, ["tmux", "-L", server, "-f", "/dev/null", *args], env_unset=scrub,
                       env_set=remote_env)

    try:
        started = tmux("new-session", "-d", "-s", "agent one", "sleep 600")
        assert started.returncode == 0, started
        listed = tmux("list-sessions", "-F", "#{session_name}")
        assert listed.stdout == "agent one\n", listed
        assert (tmpdir / f"tmux-{os.getuid()}" / server).is_socket()
        assert tmux("kill-server").returncode == 0
        gone = tmux("list-sessions")
        assert gone.returncode == 1 and SshTransport(sshd.host, masters, 10).classify(gone) is None
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], env={**sshd.env, "TMUX_TMPDIR": str(tmpdir)},
                       capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_parallel_calls_all_get_through_with_a_clean_stderr(sshd: Sshd, masters: Path) -> None:
    # A status asks its servers in parallel: first they race to become the master, then more calls than the
    # master's sessions (sshd's MaxSessions, 10) overlap. The ones refused run unshared; none fails, and what ssh
    # says about it is taken out of stderr.
    from concurrent.futures import ThreadPoolExecutor

    transport = SshTransport(sshd.host, masters, 10)
    for count, command in ((4, "echo $0"), (14, "sleep 1; echo $0")):
        with ThreadPoolExecutor(count) as pool:
            argvs = [["sh", "-c", command, str(n)] for n in range(count)]
            results = list(pool.map(lambda argv: _remote(sshd, masters, argv), argvs))
        assert [r.stdout for r in results] == [f"{n}\n" for n in range(count)], results
        assert [transport.clean(r).stderr for r in results] == [""] * count, results
