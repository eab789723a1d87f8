"""A real `mam serve` process on a free 127.0.0.1 port over a real tmux fleet, reached as a browser or a script
reaches it: the event stream tells the fleet and a change into blocked; 200 event-stream clients at once are
bounded; a client that sends its headers a byte at a time is cut off; off loopback without a token it never
starts. Each server is ended by its pid; none is left."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import Tmux, Workspace

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

import httpx

from mam.web.guard import MAX_STREAMS
from mam.web.server import READ_TIMEOUT

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(ok: Callable[[], bool], limit: float = 30) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if ok():
            return True
        time.sleep(0.1)
    return ok()


@contextmanager
def mam_serve(ws: Workspace, *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mam", "serve", "--bind", f"127.0.0.1:{port}", *args],
                            env=ws.env, cwd=ws.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(base + "/api/openapi.json", timeout=2).status_code in (200, 401)
        except httpx.HTTPError:
            return False
    try:
        assert until(up, 60), proc.stderr.read() if proc.poll() is not None else "no answer"
        yield base, proc
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def events(base: str, wanted: Callable[[str, dict[str, object]], bool], limit: float = 60) -> list[tuple[str, dict]]:
    """The stream's events until one is `wanted` (or `limit` seconds)."""
    seen: list[tuple[str, dict]] = []
    deadline = time.monotonic() + limit
    with httpx.stream("GET", base + "/api/events", timeout=httpx.Timeout(limit, connect=10)) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                seen.append((kind, json.loads(line[6:])))
                if wanted(*seen[-1]) or time.monotonic() > deadline:
                    return seen
    return seen


def test_serve_streams_the_fleet_and_its_changes(ws: Workspace, tmux: Tmux) -> None:
    one = tmux.name()
    proc = ws.mam("spawn", "turner", "--agent", "codex", "--server", one, "--command", sys.executable, "--",
                  STANDIN, "codex", "working", "--then", "blocked", "--after", "4")
    assert proc.returncode == 0, proc.stderr
    with mam_serve(ws) as (base, server):
        seen = events(base, lambda kind, data: kind == "change")
        kinds = [kind for kind, _ in seen]
        assert kinds[0] == "fleet" and kinds[-1] == "change", kinds
        change = seen[-1][1]
        assert (change["name"], change["to"], change["from"]) == ("turner", "blocked", "working"), change
        assert {"schema", "backend", "server", "host", "at", "state_source", "evidence"} <= set(change)
        fleets = [data for kind, data in seen if kind == "fleet"]
        assert any(row["state"] == "working" for f in fleets for row in f["rows"])  # type: ignore[attr-defined]
        metrics = httpx.get(base + "/metrics").text
        assert 'state="blocked"} 1.0' in metrics and "mam_agent_state_seconds_total" in metrics
    assert server.returncode is not None


def test_many_event_streams_and_a_slow_client_are_bounded(ws: Workspace, tmux: Tmux) -> None:
    with mam_serve(ws) as (base, server):
        port = int(base.rsplit(":", 1)[1])
        request = f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        socks, answers = [], []
        try:
            for _ in range(200):
                s = socket.create_connection(("127.0.0.1", port), timeout=20)
                s.sendall(request)
                socks.append(s)
            for s in socks:
                answers.append(s.recv(64).split(b"\r\n")[0])
        finally:
            for s in socks:
                s.close()
        ok = sum(a.startswith(b"HTTP/1.1 200") for a in answers)
        busy = sum(a.startswith(b"HTTP/1.1 503") for a in answers)
        assert ok <= MAX_STREAMS and ok + busy == 200 and busy >= 100, answers[:3]
        # They are let go: a new client is served, and the count of streams comes back down.
        assert until(lambda: httpx.get(base + "/api/fleet", timeout=10).status_code == 200)
        assert until(lambda: "mam_serve_event_streams 0.0" in httpx.get(base + "/metrics", timeout=10).text)

        # A client that sends its headers slowly is cut off after READ_TIMEOUT; others are served meanwhile.
        # One whose body never comes whole is answered 408, nothing done (the body is read before any action).
        slow = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT * 4)
        slow_body = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT * 4)
        page = httpx.get(base + "/api/session")
        cookie, token = page.headers["set-cookie"].split(";")[0], page.json()["csrf"]
        begun = time.monotonic()
        try:
            slow.sendall(b"GET /api/fleet HTTP/1.1\r\nHo")
            slow_body.sendall(f"POST /api/agents/a1/send HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                              f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie}\r\nX-CSRF-Token: {token}\r\n"
                              "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode())
            assert httpx.get(base + "/api/fleet", timeout=10).status_code == 200
            assert slow.recv(1024) == b""  # closed by the server
            answer = slow_body.recv(1024)
        finally:
            slow.close()
            slow_body.close()
        assert READ_TIMEOUT - 1 <= time.monotonic() - begun < READ_TIMEOUT * 3
        assert answer.split(b"\r\n")[0] == b"HTTP/1.1 408 Request Timeout", answer
    assert server.returncode is not None


def test_a_token_file_guards_the_server(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    token_file = tmp_path / "conf" / "serve-token"
    with mam_serve(ws, "--token-file", str(token_file)) as (base, server):
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert httpx.get(base + "/api/fleet").status_code == 401
        assert httpx.get(base + "/metrics").status_code == 401
        assert httpx.get(base + "/api/fleet", headers={"authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(base + "/api/fleet", headers={"authorization": "Bearer wrong-token-12345678"}
                         ).status_code == 401


def test_logins_sent_at_once_are_locked_after_five_too(ws: Workspace, tmp_path: Path) -> None:
    """Twenty wrong logins whose bodies arrive together (each waited for its body after the lock was looked at):
    five are judged, the rest locked out, as when they come one by one."""
    from mam.web.guard import MAX_FAILURES

    with mam_serve(ws, "--token-file", str(tmp_path / "conf" / "serve-token")) as (base, server):
        port = int(base.rsplit(":", 1)[1])
        body = b"token=wrong-token-0000000000"
        socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(20)]
        try:
            for s in socks:
                s.sendall(f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
                          "Content-Type: application/x-www-form-urlencoded\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode())
            for s in socks:
                s.sendall(body)
            statuses = [s.recv(64).split(b" ")[1] for s in socks]
        finally:
            for s in socks:
                s.close()
        assert statuses.count(b"401") == MAX_FAILURES and statuses.count(b"429") == 20 - MAX_FAILURES, statuses


def test_a_logout_ends_the_sessions_event_stream(ws: Workspace, tmp_path: Path) -> None:
    from mam.web.routes import HEARTBEAT

    with mam_serve(ws, "--token-file", str(tmp_path / "conf" / "serve-token")) as (base, server):
        token = (tmp_path / "conf" / "serve-token").read_text().strip()
        login = httpx.post(base + "/login", data={"token": token}, headers={"origin": base})
        cookies = {"mam_session": login.cookies["mam_session"]}
        with httpx.stream("GET", base + "/api/events", cookies=cookies,
                          timeout=httpx.Timeout(HEARTBEAT * 4, connect=10)) as stream:
            lines = stream.iter_lines()
            assert next(lines) == "event: fleet"
            out = httpx.post(base + "/logout", cookies=cookies, headers={"origin": base})
            assert out.status_code == 303
            begun, ended = time.monotonic(), True
            for _ in lines:  # the loop ends when the server ends the stream
                if time.monotonic() - begun > HEARTBEAT * 3:
                    ended = False
                    break
        assert ended and time.monotonic() - begun < HEARTBEAT * 3
        assert httpx.get(base + "/api/events", cookies=cookies).status_code == 401


def test_off_loopback_without_a_token_it_never_starts(ws: Workspace) -> None:
    for bind in ("0.0.0.0:8765", "[::]:8765", "192.0.2.1:8765"):
        proc = ws.mam("serve", "--bind", bind)
        assert proc.returncode == 2 and "needs a token" in proc.stderr, (bind, proc.stderr)
    proc = ws.mam("serve", "--bind", "nowhere.example:80")
    assert proc.returncode == 2 and "expected an IP address" in proc.stderr
    inside = ws.root / "token"
    proc = ws.mam("serve", "--token-file", str(inside), "--bind", f"127.0.0.1:{free_port()}")
    assert proc.returncode == 2 and "inside the workspace" in proc.stderr and not inside.exists()
    assert ws.mam("serve", "--json").returncode == 2


def test_a_taken_port_is_said_in_one_line(ws: Workspace) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = ws.mam("serve", "--bind", f"127.0.0.1:{port}")
    assert proc.returncode == 1, (proc.returncode, proc.stderr)  # not uvicorn's 3, mam's "backend not found"
    assert "cannot listen on 127.0.0.1" in proc.stderr and "address already in use" in proc.stderr
    assert "--bind 127.0.0.1:PORT" in proc.stderr and "serving" not in proc.stderr, proc.stderr


def test_a_kept_alive_connection_sending_slow_headers_is_cut_off(ws: Workspace) -> None:
    """After one answer, the next request's headers a byte at a time: closed after READ_TIMEOUT, as on a new
    connection (else 150 such connections make every client's answer a 503)."""
    with mam_serve(ws) as (base, server):
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT * 4) as slow:
            slow.sendall(f"GET /api/fleet HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            answer = slow.recv(65536)
            head, _, body = answer.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(body) < length and (more := slow.recv(65536)):
                body += more
            assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
            begun, closed = time.monotonic(), False
            for byte in f"GET /api/fleet HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Pad: {'a' * 200}".encode():
                try:
                    slow.sendall(bytes([byte]))
                except OSError:
                    closed = True
                    break
                if time.monotonic() - begun > READ_TIMEOUT * 3:
                    break
                time.sleep(1)
            if not closed:
                slow.settimeout(1)
                try:
                    closed = slow.recv(1024) == b""
                except TimeoutError:
                    closed = False
        assert closed and time.monotonic() - begun < READ_TIMEOUT * 3, time.monotonic() - begun


def test_other_commands_never_load_the_web_libraries(ws: Workspace) -> None:
    code = ("import sys, runpy\nsys.argv = ['mam', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\n")
    for args in (["--help"], ["status", "--json"], ["serve", "--help"]):
        proc = subprocess.run([sys.executable, "-c", code, *args], env=ws.env, cwd=ws.root, capture_output=True,
                              text=True, timeout=60)
        modules = set(proc.stderr.rsplit("MODULES ", 1)[1].split())
        assert not {m for m in modules if m.split(".")[0] in ("starlette", "uvicorn", "prometheus_client")
                    or m.startswith("mam.web")}, args
