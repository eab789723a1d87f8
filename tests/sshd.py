"""A real OpenSSH sshd on 127.0.0.1, a free port and throwaway keys, for the SSH transport's tests.

The "remote" side is this machine and this user: a test that starts anything there (a tmux server) must pin
it to private sockets itself (`-L`, TMUX_TMPDIR, HOME through the transport's env_set), as every tmux test does.

ssh reads `~/.ssh/config` from the passwd entry's home directory, not from $HOME, so a pinned HOME cannot point
it at the test's configuration: every client call here passes `-F sshd.config_path` (which also keeps
/etc/ssh/ssh_config out: it is read only when no -F is given).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
ALIAS = "mam-test"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-t", "ed25519", "-C", "mam-test", "-f", str(path)],
                   check=True, timeout=30, capture_output=True, stdin=subprocess.DEVNULL)


def _descendants(pid: int) -> list[int]:
    """The processes below `pid`, from /proc: sshd's per-connection children call setsid(), so a kill of its
    process group would miss them (and with them the connections a ControlMaster keeps open)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class Sshd:
    root: Path  # everything of this sshd lives below it
    port: int
    config_path: Path  # the client ssh_config: `ssh -F config_path mam-test` logs in
    wrong_key: Path  # a client ssh_config with a user key that is not in authorized_keys
    env: dict[str, str]  # an environment to run ssh in: HOME pinned, the session's markers gone
    host: str = ALIAS
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.running():
            return
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(self.root / "sshd_config")],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on port {self.port}: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        """End the listener and every connection it serves, so that no ControlMaster can still get through."""
        if self.proc is None:
            return
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None

    def ssh(self, *args: str, config: Path | None = None, timeout: float = 30,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`ssh -F CONFIG ARGS...`, for a test's own checks (`-O check`)."""
        return subprocess.run(["ssh", "-F", str(config or self.config_path), *args], env=env or self.env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def close_masters(self, control_dir: Path) -> None:
        """Ask each ControlMaster with a socket in `control_dir`, or in this worker's own folder for the sockets
        of workspaces with long paths, to exit (they would linger for ControlPersist)."""
        from conftest import RUNTIME_DIR

        for folder in (control_dir, RUNTIME_DIR / "mam-ssh"):
            for sock in sorted(folder.iterdir()) if folder.is_dir() else []:
                if sock.is_socket():
                    self.ssh("-o", f"ControlPath={sock}", "-O", "exit", self.host, timeout=10)


def _client_config(path: Path, root: Path, port: int, key: Path) -> None:
    user = pwd.getpwuid(os.getuid()).pw_name  # not $USER: sshd logs in the passwd entry's user
    path.write_text(
        f"Host {ALIAS}\n"
        f"    HostName 127.0.0.1\n"
        f"    Port {port}\n"
        f"    User {user}\n"
        f"Host *\n"
        f"    IdentityFile {key}\n"
        f"    IdentitiesOnly yes\n"
        f"    IdentityAgent none\n"
        f"    UserKnownHostsFile {root / 'known_hosts'}\n"
        f"    GlobalKnownHostsFile /dev/null\n"
        f"    StrictHostKeyChecking yes\n"
        f"    UpdateHostKeys no\n"
        f"    PasswordAuthentication no\n"
        f"    KbdInteractiveAuthentication no\n")


def _server_config(root: Path, port: int) -> str:
    lines = [
        "ListenAddress 127.0.0.1", f"Port {port}", f"HostKey {root / 'host_ed25519'}",
        f"AuthorizedKeysFile {root / 'authorized_keys'}", f"PidFile {root / 'sshd.pid'}",
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "UsePAM no", "StrictModes no",
        # Nothing of the client's environment is accepted, nothing of the user's own files is read: the
        # tests prove mam forwards no marker, and ~/.ssh/rc or ~/.ssh/environment would blur that.
        "PermitUserEnvironment no", "PermitUserRC no", "PrintMotd no", "PrintLastLog no",
        "X11Forwarding no", "AllowAgentForwarding no", "LogLevel INFO",
    ]
    # No AcceptEnv line and no Subsystem line: none accepted, none offered.
    if os.getuid() == 0:
        lines.append("PermitRootLogin prohibit-password")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session", name="sshd")
def sshd_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if not SSHD.exists():
        pytest.skip(f"{SSHD} is not installed (package openssh-server)")
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("the OpenSSH client (ssh, ssh-keygen) is not installed")
    if os.getuid() == 0 and not Path("/run/sshd").is_dir():
        # sshd running as root wants its privilege separation directory (systemd normally makes it).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    root = tmp_path_factory.mktemp("sshd")
    _keygen(root / "host_ed25519")
    _keygen(root / "user_ed25519")
    _keygen(root / "wrong_ed25519")
    (root / "authorized_keys").write_text((root / "user_ed25519.pub").read_text())
    home = root / "home"
    home.mkdir()
    from conftest import base_env

    # Each pytest-xdist worker runs its own sshd: a port another one took between _free_port() and sshd's
    # bind is tried again on a new port.
    for attempt in range(3):
        port = _free_port()
        _configure(root, port)
        server = Sshd(root, port, root / "ssh_config", root / "wrong_key_config", base_env(home))
        try:
            server.start()
            break
        except RuntimeError:
            server.stop()
            if attempt == 2 or "Address already in use" not in server.log.read_text():
                raise
    try:
        yield server
    finally:
        server.stop()


def _configure(root: Path, port: int) -> None:
    """The files of an sshd on `port`: its config, the client configs and the known host key."""
    host_key = (root / "host_ed25519.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (root / "sshd_config").write_text(_server_config(root, port))
    _client_config(root / "ssh_config", root, port, root / "user_ed25519")
    _client_config(root / "wrong_key_config", root, port, root / "wrong_ed25519")
