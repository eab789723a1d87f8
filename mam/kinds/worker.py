"""Reading screens in a process of its own, for the callers that read them off the main thread (the poller
threads of `mam top`, any program that calls mam from a thread).

Python's `re` holds the GIL while it matches and has no time limit of its own; the limit on reading one screen
is a timer signal, which Python delivers to the main thread only (mam.kinds.classify). A rule that runs away in
another thread therefore stops every thread of the process: `mam top` stopped drawing and taking keys. Here the
screens are read by a long-lived child process, on its main thread, with the same time limit; the caller waits
on a pipe (which holds no lock) and, should the child not answer in time, kills it and starts another at the
next screen. The child gets the rules as the caller loaded them (pickled: it only ever reads what this process
wrote) and answers in JSON, four strings per screen.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from typing import IO, Any, BinaryIO

from mam.kinds.classify import LOST, Verdict, classify_screen, time_limits
from mam.kinds.library import Library

GRACE = 1.0  # seconds the child may take beyond the screen's own limit before it is taken for hung
START_TIMEOUT = 10.0  # seconds for a new child to load (Python and the rules' modules)
KEEP = 8  # libraries the child keeps, the oldest sent forgotten first (a caller may use a few: one per workspace)
MAX_ANSWER = 64 * 1024  # a verdict is four short strings: anything longer is not the child's answer
_HEADER = struct.Struct(">I")

# The child: mam's own modules from where this process has them (-I: no PYTHONPATH, no user site, no current
# directory on its path, so nothing in a workspace is imported), reading frames on stdin until it closes.
_CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from mam.kinds.worker import serve; serve()"


def _mam_root() -> str:
    import mam  # only to find mam's own folder for the child's sys.path

    return os.path.dirname(os.path.dirname(os.path.abspath(mam.__file__)))


class _Child:
    """One child process and the libraries it holds (by digest)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and code, an explicit argv
            [sys.executable, "-I", "-c", _CHILD, _mam_root()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={}, cwd="/", start_new_session=True)
        assert self.proc.stdin is not None
        os.set_blocking(self.proc.stdin.fileno(), False)  # frames are written by _write, with a deadline
        self.holds: list[str] = []  # the digests of the libraries it keeps, oldest first, as it keeps them
        self.answered = False  # until its first answer, it may still be loading its modules

    def send(self, message: tuple[Any, ...], deadline: float) -> bool:
        """Write one frame by `deadline`; whether it was: a child that reads no more (stopped, hung) must not hold
        the caller once the pipe is full (a screen is up to $MAM_MAX_OUTPUT bytes, a pipe holds 64 KiB)."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        stdin = self.proc.stdin
        assert stdin is not None
        return _write(stdin, _HEADER.pack(len(data)) + data, deadline)

    def answer(self, deadline: float) -> dict[str, Any] | None:
        """The child's next answer, or None when it gave none by `deadline` (or died, or wrote nonsense)."""
        stdout = self.proc.stdout
        assert stdout is not None
        head = _read(stdout, _HEADER.size, deadline)
        if head is None:
            return None
        (size,) = _HEADER.unpack(head)
        body = _read(stdout, size, deadline) if size <= MAX_ANSWER else None
        if body is None:
            return None
        try:
            answer = json.loads(body)
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None

    def end(self) -> None:
        """Kill it; whoever waits on its answer then reads the end of its output."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def kill(self) -> None:
        self.end()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _write(stream: IO[bytes], data: bytes, deadline: float) -> bool:
    """All of `data` to `stream` (non-blocking: _Child) by `deadline`, waiting without holding the GIL."""
    fd = stream.fileno()
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [fd], [], left)[1]:
            return False
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue
    return True


def _read(stream: IO[bytes], size: int, deadline: float) -> bytes | None:
    """Exactly `size` bytes of `stream` by `deadline`, waiting without holding the GIL; None if not."""
    fd = stream.fileno()
    data = b""
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class Reader:
    """The child process, shared by all threads: one screen at a time (they would take turns for the GIL in any
    case), started at the first screen and again after one that it did not read in time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: _Child | None = None
        # Each library pickled once, by identity (a Library is not hashable: its kinds are a dict), while it lives.
        self._pickled: dict[int, tuple[weakref.ref[Library], str, bytes]] = {}
        self.started = 0  # children started, for the tests

    def classify(self, library: Library, kind: str | None, text: str, budget: float,
                 below_cursor: int | None) -> Verdict:
        digest, blob = self._pickle(library)
        with self._lock:
            child = self._child
            if child is None or child.proc.poll() is not None:
                child = self._child = _Child()
                self.started += 1
            deadline = time.monotonic() + budget + GRACE + (0 if child.answered else START_TIMEOUT)
            answer = None
            try:
                sent = True
                if digest not in child.holds:
                    sent = child.send(("library", digest, blob), deadline)
                    child.holds.append(digest)
                    del child.holds[:-KEEP]  # as the child forgets them
                if sent and child.send(("read", digest, kind, text, budget, below_cursor), deadline):
                    answer = child.answer(deadline)
            except (OSError, ValueError):
                pass
            if answer is None:
                self._child = None
                child.kill()
                return Verdict("unknown", None, None, LOST)
            child.answered = True
        fields = [value if isinstance(value, str) else None
                  for value in (answer.get(k) for k in ("state", "rule", "line", "overtime"))]
        return Verdict(fields[0] or "unknown", fields[1], fields[2], fields[3])

    def _pickle(self, library: Library) -> tuple[str, bytes]:
        key = id(library)
        known = self._pickled.get(key)
        if known is not None and known[0]() is library:
            return known[1], known[2]
        blob = pickle.dumps(library, protocol=pickle.HIGHEST_PROTOCOL)
        digest = hashlib.sha256(blob).hexdigest()
        pickled = self._pickled

        def forget(_: object) -> None:
            pickled.pop(key, None)

        self._pickled[key] = (weakref.ref(library, forget), digest, blob)
        return digest, blob

    def stop(self) -> None:
        """Kill the child now, without waiting for a screen being read (the thread reading it gets `unknown`)."""
        child = self._child
        if child is not None:
            child.end()


_reader: Reader | None = None
_reader_lock = threading.Lock()


def reader() -> Reader:
    global _reader
    with _reader_lock:
        if _reader is None:
            _reader = Reader()
            atexit.register(_reader.stop)
        return _reader


def stop() -> None:
    """End the child, if one runs (mam ends its children on the way out)."""
    if _reader is not None:
        _reader.stop()


# -- the child ----------------------------------------------------------------------------------------------


def serve(source: BinaryIO | None = None, sink: BinaryIO | None = None) -> None:
    """Read screens until the input ends: a ("library", digest, pickled Library) frame gives rules, a ("read", digest,
    kind, text, budget, below_cursor) frame asks for one verdict, answered as one JSON frame."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the caller: it ends this child
    source = source or sys.stdin.buffer
    sink = sink or sys.stdout.buffer
    libraries: dict[str, Library] = {}
    with time_limits():
        while True:
            head = source.read(_HEADER.size)
            if len(head) < _HEADER.size:
                return
            (size,) = _HEADER.unpack(head)
            message = pickle.loads(source.read(size))  # written by the process that started this one
            if message[0] == "library":
                libraries[message[1]] = pickle.loads(message[2])
                while len(libraries) > KEEP:
                    del libraries[next(iter(libraries))]
                continue
            _, digest, kind, text, budget, below = message
            verdict = classify_screen(libraries[digest], kind, text, budget, below)
            body = json.dumps({"state": verdict.state, "rule": verdict.rule, "line": verdict.line,
                               "overtime": verdict.overtime}).encode()
            sink.write(_HEADER.pack(len(body)) + body)
            sink.flush()
