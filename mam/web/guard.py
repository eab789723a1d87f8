"""What `mam serve` guards, free of any web framework: the bind address, the token (made, kept 0600, compared in
constant time), the names a request may give as its Host, the sessions and their CSRF tokens, and the lock on a
client that keeps failing to log in. The routes (mam.web.routes) ask these questions; nothing here answers HTTP."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mam.util.errors import MamError
from mam.util.safefile import read_text

DEFAULT_PORT = 8765
MAX_BODY = 64 * 1024  # bytes of a request's body: an action's JSON is a few hundred
MAX_STREAMS = 100  # event-stream clients at once
MAX_FAILURES = 5  # failed logins from one address ...
LOCK_SECONDS = 15 * 60  # ... lock it out this long
SESSION_SECONDS = 12 * 3600  # a login lasts this long
MAX_SESSIONS = 1000  # the oldest go first past this
MAX_NAME = 200  # characters of an agent's name in a path


@dataclass(frozen=True)
class Bind:
    address: str  # an IP literal, or "localhost"
    port: int

    @property
    def loopback(self) -> bool:
        return self.address == "localhost" or ipaddress.ip_address(self.address).is_loopback

    @property
    def url_host(self) -> str:
        return f"[{self.address}]" if ":" in self.address else self.address


def parse_bind(text: str) -> Bind:
    """ADDR:PORT, [V6ADDR]:PORT, or ADDR alone (port 8765); ADDR an IP address or localhost."""
    address, port = text, str(DEFAULT_PORT)
    if text.startswith("["):
        inner, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise MamError("usage", f"--bind {text!r}: expected ADDR:PORT or [IPV6]:PORT")
        address, port = inner, rest[1:] or port
    elif text.count(":") == 1:
        address, _, port = text.partition(":")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:  # `²` is a digit int() refuses
        raise MamError("usage", f"--bind {text!r}: the port must be a number from 1 to 65535")
    if address != "localhost":
        try:
            address = str(ipaddress.ip_address(address))
        except ValueError:
            raise MamError("usage", f"--bind {text!r}: expected an IP address or localhost, not {address!r}") from None
    return Bind(address, int(port))


def allowed_hosts(bind: Bind) -> frozenset[str]:
    """The Host headers a request may carry (anything else is DNS rebinding or a mistake): the loopback names and
    the bound address, with the port; bound to every address (0.0.0.0, ::), this machine's names and addresses."""
    names = {"127.0.0.1", "localhost", "[::1]", bind.url_host}
    if bind.address in ("0.0.0.0", "::"):
        hostname = socket.gethostname()
        names |= {hostname, socket.getfqdn()}
        try:
            for info in socket.getaddrinfo(hostname, None):
                ip = str(info[4][0])
                names.add(f"[{ip}]" if ":" in ip else ip)
        except OSError:
            pass
    with_port = {f"{name.lower()}:{bind.port}" for name in names}
    if bind.port == 80:  # a browser leaves the default port out of Host and Origin
        with_port |= {name.lower() for name in names}
    return frozenset(with_port)


def check_free(bind: Bind) -> None:
    """Refuse, in one line that says what to do, an address that cannot be listened on (the port taken, a port
    under 1024 without the right, an address not this machine's), before the server says it is serving."""
    try:
        infos = socket.getaddrinfo(bind.address, bind.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise MamError("operation_failed", f"cannot listen on {bind.url_host}:{bind.port}: {exc}") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no reason
            try:
                probe.bind(address)
            except OSError as exc:
                raise MamError("operation_failed", f"cannot listen on {bind.url_host}:{bind.port}: "
                               f"{(exc.strerror or str(exc)).lower()}",
                               hint=f"choose another port (--bind {bind.url_host}:PORT), or stop what listens "
                                    "there") from None


def default_token_file(env: dict[str, str] | os._Environ[str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(base) / "mam" / "serve-token"


TOKEN_FILE_BYTES = 8192  # a token of at most 4096 characters, its newline and room to say so


def load_token(path: Path, workspace: Path | None) -> tuple[str, bool]:
    """The token in `path`, made there (0600, 32 random bytes) when the file does not exist; True when made. A file
    inside the workspace, or one others may read, is refused: a token beside a clone is a token in its history."""
    path = path.expanduser().absolute()
    if workspace is not None and path.resolve().is_relative_to(workspace.resolve()):
        raise MamError("usage", f"--token-file {path}: inside the workspace {workspace}",
                       hint="keep it outside any project, e.g. ~/.config/mam/serve-token")
    if path.is_symlink():  # dangling or not: who made the link may choose where the token goes
        raise MamError("usage", f"--token-file {path}: a symbolic link (mam follows none here)",
                       hint=f"give the file itself: --token-file {path.resolve()}")
    made = False
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise MamError("usage", f"--token-file {path}: cannot make it: {exc.strerror or exc}",
                           hint="name a file in a folder you may write, e.g. ~/.config/mam/serve-token") from None
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        made = True
    def owner_only(info: os.stat_result) -> None:
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            whose = "not yours" if info.st_uid != os.getuid() else "others may read it"
            # Never "chmod 600" alone: the file may be anything (`/etc/passwd` as root was told to chmod it).
            raise MamError("usage", f"--token-file {path}: {whose} (mode {stat.S_IMODE(info.st_mode):o})",
                           hint=f"if it holds only your token, `chmod 600 {path}`; else name a file that does not "
                                "exist yet, which mam makes (e.g. ~/.config/mam/serve-token)")

    # A regular file only, never through a link, checked before a byte is read (a FIFO is refused at once).
    text = read_text(path, f"--token-file {path}", TOKEN_FILE_BYTES, "usage", follow=False, check=owner_only,
                     hint="name a file that does not exist yet: mam makes it, e.g. ~/.config/mam/serve-token")
    if text is None:
        raise MamError("usage", f"--token-file {path}: it went away while mam read it")
    token = text.strip()
    if len(token) < 16 or len(token) > 4096 or any(c.isspace() or not c.isprintable() for c in token):
        raise MamError("usage", f"--token-file {path}: expected one token of 16 to 4096 printable characters")
    return token, made


def token_id(token: str) -> str:
    """A short name of the token that tells nothing of it: the first 8 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


@dataclass
class Session:
    csrf: str
    made: float
    authed: bool  # made by a login with the token (False: loopback without a token)


@dataclass
class Guard:
    """The token (None: loopback without one, nothing asked), the sessions, and the failed logins per client."""

    bind: Bind
    token: str | None = None
    read_only: bool = False
    hosts: frozenset[str] = frozenset()
    clock: object = time.monotonic
    _sessions: dict[str, Session] = field(default_factory=dict)
    _failures: dict[str, tuple[int, float]] = field(default_factory=dict)  # client -> (failures, locked until)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not self.hosts:
            self.hosts = allowed_hosts(self.bind)

    def now(self) -> float:
        return float(self.clock())  # type: ignore[operator]

    @property
    def token_id(self) -> str | None:
        return None if self.token is None else token_id(self.token)

    def host_ok(self, host: str | None) -> bool:
        return host is not None and host.lower() in self.hosts

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        """Same origin: http://HOST as the request's own (already checked) Host."""
        return origin is not None and host is not None and origin.lower() == f"http://{host.lower()}"

    def token_ok(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def locked(self, client: str) -> bool:
        with self._lock:
            failures, until = self._failures.get(client, (0, 0.0))
            return until > self.now()

    def failed(self, client: str) -> None:
        with self._lock:
            failures, until = self._failures.get(client, (0, 0.0))
            if until and until <= self.now():
                failures = 0
            failures += 1
            self._failures[client] = (failures, self.now() + LOCK_SECONDS if failures >= MAX_FAILURES else 0.0)
            if len(self._failures) > 10000:  # bounded: the oldest entries go
                for key in list(self._failures)[:1000]:
                    del self._failures[key]

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)

    def new_session(self, authed: bool) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[sid] = Session(secrets.token_urlsafe(32), self.now(), authed)
        return sid

    def session(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            found = self._sessions.get(sid)
            if found is not None and self.now() - found.made > SESSION_SECONDS:
                del self._sessions[sid]
                return None
            return found

    def end_session(self, sid: str | None) -> None:
        with self._lock:
            self._sessions.pop(sid or "", None)


def name_ok(name: str) -> bool:
    """An agent's name as a path gives it: no control characters, no `/` or `\\`, not `.` or `..`, not too long."""
    return (0 < len(name) <= MAX_NAME and name not in (".", "..") and "/" not in name and "\\" not in name
            and all(c.isprintable() for c in name))
