"""Running a backend's argv on another machine through the system `ssh` client.

A backend builds the same argv whatever the host; this module turns it into one local ssh argv, and tells the
failures of ssh itself (no connection, no login) from the remote command's own: ssh's are always `unknown`,
never `down`, because only the backend's own answer from the remote side can say that no server runs there.
"""

from __future__ import annotations

import errno
import math
import os
import re
import shlex
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from mam.calls import runner
from mam.plugin.helpers import first_line
from mam.plugin.records import CommandResult, ErrorKind, ServerError
from mam.util.errors import MamError
from mam.util.names import check_host, is_local, match_host
from mam.util.quote import shown

CONTROL_PERSIST = 60  # seconds a shared connection stays open after its last call
# What the local ssh client runs with: enough to find itself, its config and keys (agent) and a locale, nothing
# a user's `SendEnv` could forward (the caller's markers never leave this machine).
SSH_CLIENT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK", "KRB5CCNAME", "LANG", "TERM")

_VAR_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# ssh binds a master's socket at ControlPath + "." + 16 random characters, then renames it into place; sun_path
# holds 104 bytes with its NUL on the BSDs and macOS (108 on Linux). %C expands to 40 hex digits.
SOCKET_PATH_MAX = 104
_SOCKET_TAIL = len("/") + 40 + len(".") + 16 + 1
# ssh expands '%' tokens, '${VAR}' and a leading '~' in ControlPath and splits an -o value at whitespace and
# quotes: a folder with any character outside these is not spelled into it (the short fallback is used instead).
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9/._+-]*")


def split_host(host: str) -> tuple[str, int | None]:
    """The destination and port ssh gets for a host check_host accepted: `h:22` is `-p 22` and `h`."""
    if is_local(host):
        raise ValueError(f"not a remote host: {host!r}")
    match = match_host(check_host(host))
    if match is None:  # check_host accepted it, so it matched
        raise ValueError(f"not a remote host: {host!r}")
    user = host[:host.index("@") + 1] if "@" in host else ""
    port = match["port"] or match["port6"]
    name = match["name"] or match["v6b"] or match["v6"]
    return user + name, int(port) if port else None


def remote_command(argv: Sequence[str], env_unset: Sequence[str] = (),
                   env_set: Mapping[str, str] | None = None) -> str:
    """The one string the remote login shell runs: each word quoted once, behind `env -u V ... V=x --` when
    asked. A name of `env_unset` ending in '*' (the scrub's PREFIX_* rules) is a prefix: those are unset by a
    small sh loop over the remote environment first, since env -u knows exact names only.
    The quoting is POSIX sh's (sh, bash, dash, zsh, ksh); a fish or csh login shell reads it otherwise."""
    words = list(argv)
    if not words:
        raise ValueError("empty argv")
    if words[0].startswith("-"):  # sshd runs `$SHELL -c COMMAND`: bash would take it for its own option
        raise ValueError("the program name begins with '-'")
    for word in words:
        if "\0" in word:
            raise ValueError("an argument contains a NUL byte")
    exact = [name for name in env_unset if not name.endswith("*")]
    prefixes = [name[:-1] for name in env_unset if name.endswith("*")]
    bad = [name for name in [*exact, *prefixes, *(env_set or {})] if not _VAR_RE.fullmatch(name)]
    if bad:
        raise ValueError(f"not a variable name: {bad[0]!r}")
    prefix: list[str] = []
    if exact or env_set:
        if "=" in words[0]:
            raise ValueError("env would read the program name as an assignment")
        prefix = ["env"]
        for name in exact:
            prefix += ["-u", name]
        prefix.append("--")
        prefix += [f"{name}={value}" for name, value in (env_set or {}).items()]
    if prefixes:
        # Only names that match a validated prefix are unset, so a value spanning lines cannot inject one.
        cases = "|".join(f"{name}*" for name in prefixes)
        script = ('for v in $(env | sed -n "s/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p"); do '
                  f'case $v in {cases}) unset "$v";; esac; done; exec "$@"')
        prefix = ["sh", "-c", script, "sh", *prefix]
    return " ".join(shlex.quote(word) for word in prefix + words)


def _open_private_dir(path: Path) -> None:
    """Make `path` (one level) as a 0700 folder of ours, or check the one there is: its parent and itself are
    never followed when a symbolic link was planted, and a folder of another user or open to others is refused
    (a socket planted in it would answer as our connection)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        parent = os.open(path.parent, flags)
    except OSError as exc:
        raise MamError("operation_failed", f"{path.parent}: cannot open the folder for ssh connections: "
                       f"{'it is a symbolic link' if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror}"
                       ) from None
    try:
        try:
            os.mkdir(path.name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        fd = os.open(path.name, flags, dir_fd=parent)
    except OSError as exc:
        reason = "it is a symbolic link or not a folder" if exc.errno in (errno.ELOOP, errno.ENOTDIR) \
            else exc.strerror
        raise MamError("operation_failed", f"{path}: cannot use it for ssh connections: {reason}") from None
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise MamError("operation_failed", f"{path}: refusing it for ssh connections: it must be a folder of "
                       "this user that nobody else can open", hint=f"remove it, or: chmod 700 {path}")


def _fits(folder: Path) -> bool:
    return _PLAIN_PATH.fullmatch(str(folder)) is not None and \
        len(os.fsencode(str(folder))) + _SOCKET_TAIL <= SOCKET_PATH_MAX


def _short_dir() -> Path:
    """Where the sockets go when the workspace's folder is too long (or oddly spelled) for a socket path."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/") and _fits(Path(runtime) / "mam-ssh"):
        return Path(runtime) / "mam-ssh"
    return Path(f"/tmp/mam-ssh-{os.getuid()}")  # checked by _open_private_dir: ours, 0700, not a link


class SshTransport:
    """One remote host: builds the local `ssh` argv for a backend's argv and reads ssh's own failures."""

    def __init__(self, host: str, control_dir: Path, timeout: float, *, ssh_config: Path | None = None,
                 ssh: str = "ssh") -> None:
        if is_local(host):
            raise ValueError("a local host needs no transport")
        self.host = check_host(host)
        self.dest, self.port = split_host(self.host)
        self.control_dir = Path(os.path.abspath(control_dir))
        self.timeout = timeout
        self.ssh_config = ssh_config  # `-F FILE`: ssh reads ~/.ssh/config from the passwd entry, not $HOME
        self.ssh = ssh
        self._socket_dir: Path | None = None

    @property
    def connect_timeout(self) -> int:
        # ssh wants whole seconds; below the call's own limit, so that ssh's own message says what hung.
        return max(1, math.floor(self.timeout * 3 / 4))

    def socket_dir(self) -> Path:
        """The folder of the ControlPath sockets, made on first use: `control_dir` when its path is short enough
        for a socket path, else a short one of ours under $XDG_RUNTIME_DIR or /tmp."""
        if self._socket_dir is None:
            folder = self.control_dir if _fits(self.control_dir) else _short_dir()
            _open_private_dir(folder)
            self._socket_dir = folder
        return self._socket_dir

    def _options(self) -> list[str]:
        argv = [self.ssh]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
                 "-o", "ControlMaster=auto", "-o", f"ControlPath={self.socket_dir()}/%C",
                 "-o", f"ControlPersist={CONTROL_PERSIST}",
                 # Errors only: a warning ("Permanently added ...") would be the first line a backend reads.
                 "-o", "LogLevel=ERROR",
                 # A forwarding of the user's config would be tried (and could fail) on every call; and the
                 # user's agent or X display must never be handed to a host a registry row names.
                 "-o", "ClearAllForwardings=yes", "-o", "ForwardAgent=no", "-o", "ForwardX11=no"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        return argv

    def wrap(self, argv: Sequence[str], env_unset: Sequence[str] = (), env_set: Mapping[str, str] | None = None,
             *, tty: bool = False) -> list[str]:
        """The local argv that runs `argv` on the host: `-t` for an interactive client (attach), else `-T`.
        `--` before the destination: without it ssh reads options after the destination too."""
        command = remote_command(argv, env_unset, env_set)
        return [*self._options(), "-t" if tty else "-T", "--", self.dest, command]

    def control_argv(self, operation: str) -> list[str]:
        """`ssh -O check|exit` for this host's shared connection: exit 0 when a master answers."""
        if operation not in ("check", "exit"):
            raise ValueError(operation)
        return [*self._options(), "-O", operation, "--", self.dest]

    def classify_ssh(self, returncode: int | None, stderr: str) -> tuple[ErrorKind, str] | None:
        """(kind, message) when the failure came from ssh itself, None when the remote command failed (then its
        own output says what happened). ssh exits 255 for its own errors, but so may the remote command: it is
        ssh's only when the last line of stderr is one of ssh's own messages."""
        if returncode != 255:
            return None
        lines = [line.strip() for line in strip_noise(stderr).splitlines() if line.strip()]
        if not lines:
            return None
        last = lines[-1]
        for pattern, kind, what in _SSH_MESSAGES:
            if pattern.fullmatch(last):
                if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
                    what = "its host key changed (refused)"
                return kind, f"ssh to {self.host}: {what} ({shown(last, 200, quote='masked')})"
        return None

    def clean(self, result: CommandResult) -> CommandResult:
        """`result` with ssh's own notices taken out of its stderr, so that a backend reads the remote
        command's stderr as if it had run here (its first line is what a backend classifies)."""
        from dataclasses import replace

        stderr = strip_noise(result.stderr)
        return result if stderr == result.stderr else replace(result, stderr=stderr)

    def classify(self, result: CommandResult) -> ServerError | None:
        """A ServerError (never server_down) when the ssh client failed, None when the remote command did."""
        if result.not_found:
            return ServerError(ErrorKind.UNKNOWN, f"ssh to {self.host}: the ssh client ({self.ssh}) is not "
                               "installed")
        if result.os_error is not None:
            return ServerError(ErrorKind.UNKNOWN, f"ssh to {self.host}: {result.os_error}")
        found = self.classify_ssh(result.returncode, result.stderr)
        return None if found is None else ServerError(*found)

    def ssh_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The local ssh client's environment, out of the caller's `env`."""
        return {k: v for k, v in env.items() if k in SSH_CLIENT_ENV or k.startswith("LC_")}

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str], env_unset: Sequence[str] = (),
            env_set: Mapping[str, str] | None = None, limit: int | None = None,
            stdin: bytes | None = None) -> CommandResult:
        """`argv` on the host, with `env_unset` unset and `env_set` set there (a route's). The result is the
        remote command's, under the backend's own argv, as if it had run here; ssh's own failures come back as
        `transport_error` (never down), so no backend reads them. The remote command runs in the login's home
        directory (a `cwd` names a folder of this machine) and with the login's environment, less the scrub's
        markers: `env` is only for the local ssh client."""
        args = tuple(argv)
        host = self.host
        try:
            wrapped = self.wrap(args, env_unset, env_set)
        except ValueError as exc:
            return CommandResult(args, None, timeout=timeout, os_error=f"{args[0] if args else '?'}: cannot run on "
                                 f"{host}: {exc}")
        except MamError as exc:  # the folder of the shared connections is refused
            return CommandResult(args, None, timeout=timeout,
                                 transport_error=ServerError(ErrorKind.UNKNOWN, f"ssh to {host}: {exc.message}"))
        limit = runner.max_output() if limit is None else limit
        raw = self.clean(runner.run_local(wrapped, timeout=timeout, env=self.ssh_env(env), limit=limit, stdin=stdin))
        if raw.os_error == runner.over_limit(wrapped[0], limit):  # the remote command's answer, not ssh's failure
            return CommandResult(args, None, timeout=timeout, over_limit=True, transport_error=ServerError(
                ErrorKind.UNKNOWN, f"ssh to {host}: {runner.over_limit(args[0], limit)}"))
        error = self.classify(raw)
        if error is not None:
            return CommandResult(args, None, "", raw.stderr, timeout=timeout, transport_error=error)
        if raw.timed_out:  # ssh or the remote command hung: the remote command may still run there
            return CommandResult(args, None, timed_out=True, timeout=timeout, transport_error=ServerError(
                ErrorKind.TIMEOUT, f"ssh to {host}: {args[0]} gave no answer within {timeout:g} s"))
        if raw.returncode is not None and raw.returncode < 0:
            return CommandResult(args, None, "", raw.stderr, timeout=timeout, transport_error=ServerError(
                ErrorKind.UNKNOWN, f"ssh to {host}: ssh was killed by signal {-raw.returncode}"))
        return self.finish(args, timeout, raw)

    def finish(self, args: tuple[str, ...], timeout: float, raw: CommandResult) -> CommandResult:
        """The remote command's own result, under the backend's argv."""
        if raw.returncode == 127 and _remote_not_found(args[0], raw.stderr):
            return CommandResult(args, None, "", raw.stderr, not_found=True, timeout=timeout,
                                 transport_error=ServerError(ErrorKind.NOT_INSTALLED,
                                                             f"{args[0]}: not found on PATH on {self.host}"))
        return CommandResult(args, raw.returncode, raw.stdout, raw.stderr, timeout=timeout)


# What ssh says at LogLevel=ERROR on a call that then runs normally, unshared: calls racing to become the master
# of a host's shared connection (a status asks its servers in parallel) all lose but one, and a master with
# MaxSessions (sshd's default: 10) sessions open refuses one more.
_NOISE = re.compile(r"(?:ControlSocket .* already exists, disabling multiplexing"
                    r"|mux_client_request_session: session request failed: .*)\r?\n?")


def _remote_not_found(program: str, stderr: str) -> bool:
    """The remote shell's or env's word that `program` is not there (`env: 'tmux': No such file or directory`,
    `sh: 1: tmux: not found`, `bash: line 1: tmux: command not found`)."""
    last = first_line("\n".join(reversed(stderr.splitlines())))
    return program in last and ("not found" in last or "No such file or directory" in last)


def strip_noise(stderr: str) -> str:
    """`stderr` without ssh's notices about connection sharing (each a line of its own)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not _NOISE.fullmatch(line))


_T, _P, _U = ErrorKind.TIMEOUT, ErrorKind.PERMISSION, ErrorKind.UNKNOWN
# ssh's own last words (OpenSSH 9.x), most specific first.
_SSH_MESSAGES: tuple[tuple[re.Pattern[str], ErrorKind, str], ...] = tuple(
    (re.compile(pattern), kind, what) for pattern, kind, what in (
        (r"(?:\S+: )?Permission denied \([^()]*\)\.?", _P, "login refused"),
        (r"Too many authentication failures.*", _P, "login refused"),
        (r"Host key verification failed\.?", _P, "its host key is not trusted"),
        (r"ssh: Could not resolve hostname .*", _U, "unknown host name"),
        (r"ssh: connect to host .*: Connection refused", _U, "connection refused"),
        (r"ssh: connect to host .*: Connection timed out", _T, "connection timed out"),
        (r"ssh: connect to host .*", _U, "cannot connect"),
        (r"Connection timed out during banner exchange", _T, "connection timed out"),
        (r"kex_exchange_identification: .*", _U, "the connection was closed before login"),
        (r"banner exchange: .*", _U, "the connection was closed before login"),
        (r"Unable to negotiate with .*", _U, "no common algorithms"),
        (r"Connection (?:closed|reset) by .*", _U, "the connection was closed"),
        (r"Connection to .* closed by remote host\.?", _U, "the connection was closed"),
        (r"Received disconnect from .*", _U, "the server disconnected"),
        (r"(?:Disconnected from|Bad owner or permissions on) .*", _U, "ssh failed"),
        (r".*: terminating, \d+ bad configuration options?|.*: line \d+: Bad configuration option: .*", _U,
         "bad ssh configuration"),
        (r"(?:Control socket connect|mux_client_|unix_listener: |ControlPath too long).*", _U,
         "the shared connection failed"),
        (r"ssh: .*", _U, "ssh failed"),
    ))
