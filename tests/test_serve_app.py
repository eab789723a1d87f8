"""`mam serve`'s routes, with Starlette's TestClient, over a real tmux fleet of stand-in agents: the views, the
actions (each the CLI command's code, refusals and JSON), and every guard: the token, Host, Origin, CSRF,
read-only, body size and names; nothing refused is acted on."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient
from test_schemas import validator

from mam.live.actions import Actions
from mam.servers.app import App
from mam.web.guard import MAX_BODY, MAX_FAILURES, Bind, Guard, token_id
from mam.web.openapi import document
from mam.web.routes import Serve, make

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")
PORT = 18765
BASE = f"http://127.0.0.1:{PORT}"
ORIGIN = {"origin": BASE}
TOKEN = "test-token-" + "0123456789abcdef" * 2


def spawn(ws: Workspace, name: str, server: str, kind: str, *args: str) -> None:
    proc = ws.mam("spawn", name, "--agent", kind, "--server", server, "--command", sys.executable, "--", STANDIN,
                  *args)
    assert proc.returncode == 0, proc.stderr


def screen(tmux: Tmux, server: str, target: str) -> str:
    return tmux.run(server, "capture-pane", "-p", "-t", target).stdout


def until(ok: Callable[[], bool], limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not ok() and time.monotonic() < deadline:
        time.sleep(0.1)


def served(ws: Workspace, token: str | None = None, read_only: bool = False) -> tuple[TestClient, Serve]:
    app = App.open(str(ws.root), "tmux", env=ws.env)
    web, serve = make(Actions(app), Guard(Bind("127.0.0.1", PORT), token, read_only), interval=0.2)
    return TestClient(web, base_url=BASE), serve


@pytest.fixture
def open_client(ws: Workspace, tmux: Tmux) -> Iterator[TestClient]:
    client, _ = served(ws)
    with client:
        yield client


def csrf(client: TestClient) -> dict[str, str]:
    doc = client.get("/api/session").json()
    return {**ORIGIN, "x-csrf-token": doc["csrf"]}


def test_an_idle_fleet_through_the_api(ws: Workspace, tmux: Tmux) -> None:
    one = tmux.name()
    spawn(ws, "zasker", one, "codex", "codex", "blocked")
    spawn(ws, "idler", one, "gemini", "gemini", "idle")
    spawn(ws, "worker", one, "claude", "claude", "working")
    client, serve = served(ws)
    with client:
        # The fleet: mam top's view, the blocked one first; the status: mam status --json's document, valid.
        until(lambda: [r["state"] for r in client.get("/api/fleet").json()["rows"]][:1] == ["blocked"])
        fleet = client.get("/api/fleet").json()
        assert [r["name"] for r in fleet["rows"]][0] == "zasker", fleet
        assert {"name", "backend", "server", "host", "state", "source", "why", "since", "age"} <= set(fleet["rows"][0])
        assert fleet["servers"] == [] and isinstance(fleet["at"], float)
        status = client.get("/api/status").json()
        validator("status.json").validate(status)
        assert {s["name"]: s["state"] for s in status["sessions"]} == \
            {s["name"]: s["state"] for s in ws.mam_json("status")["sessions"]} | {"worker": "working"}
        assert client.get("/api/status?state=blocked").json()["sessions"][0]["name"] == "zasker"

        # Peek: the cleaned screen, as mam peek --json, never an escape.
        peek = client.get("/api/agents/zasker/peek?lines=30")
        assert peek.status_code == 200, peek.text
        validator("peek.json").validate(peek.json())
        assert "\x1b" not in peek.text and any("npm run test:e2e" in line for line in peek.json()["lines"])

        # A prompt to the blocked agent is refused as mam send refuses it, and nothing is typed.
        headers = csrf(client)
        refused = client.post("/api/agents/zasker/send", json={"text": "hello", "enter": True}, headers=headers)
        assert refused.status_code == 409 and refused.json()["exit"] == 1, refused.text
        assert "nothing was sent" in refused.json()["error"]
        assert "got: hello" not in screen(tmux, one, "zasker")
        # An answer goes to it; to one that is not blocked it is refused.
        answered = client.post("/api/agents/zasker/answer", json={"text": "1"}, headers=headers)
        assert answered.status_code == 200, answered.text
        validator("send.json").validate(answered.json())
        assert answered.json()["answer"] is True
        until(lambda: "got: 1" in screen(tmux, one, "zasker"))
        assert "got: 1" in screen(tmux, one, "zasker")
        assert client.post("/api/agents/worker/answer", json={"text": "1"}, headers=headers).status_code == 409
        # A prompt to any live agent.
        sent = client.post("/api/agents/idler/send", json={"text": "hello web", "enter": True}, headers=headers)
        assert sent.status_code == 200 and sent.json()["characters"] == 9, sent.text
        until(lambda: "got: hello web" in screen(tmux, one, "idler"))
        assert "got: hello web" in screen(tmux, one, "idler")
        # A control character is refused by send's own check: 422, exit 2.
        bad = client.post("/api/agents/idler/send", json={"text": "a\x1b[201~b"}, headers=headers)
        assert bad.status_code == 422 and bad.json()["exit"] == 2, bad.text
        # An agent not registered: 404.
        assert client.post("/api/agents/nobody/send", json={"text": "x"}, headers=headers).status_code == 404

        # Stop only with {"confirm": true}.
        assert client.post("/api/agents/worker/stop", json={}, headers=headers).status_code == 400
        assert tmux.run(one, "has-session", "-t", "=worker", check=False).returncode == 0
        stopped = client.post("/api/agents/worker/stop", json={"confirm": True}, headers=headers)
        assert stopped.status_code == 200, stopped.text
        validator("stop.json").validate(stopped.json())
        assert tmux.run(one, "has-session", "-t", "=worker", check=False).returncode != 0

        # Restore: the killed one comes back from its signed launch spec.
        tmux.run(one, "kill-session", "-t", "=idler")
        restored = client.post("/api/agents/idler/restore", json={}, headers=headers)
        assert restored.status_code == 200, restored.text
        validator("restore.json").validate(restored.json())
        assert restored.json()["agents"][0]["outcome"] == "restored"
        assert tmux.run(one, "has-session", "-t", "=idler", check=False).returncode == 0
        until(lambda: "mam_restores_total 1.0" in client.get("/metrics").text)
        metrics = client.get("/metrics").text
        assert "mam_restores_total 1.0" in metrics
        assert 'mam_agents{backend="tmux",host="local",server="' + one + '",state="blocked"} 1.0' in metrics
        assert 'mam_servers{state="up"} 1.0' in metrics and "mam_poll_seconds_bucket" in metrics


def test_restore_refuses_a_spec_this_mam_did_not_sign(ws: Workspace, tmux: Tmux) -> None:
    one = tmux.name()
    spawn(ws, "idler", one, "gemini", "gemini", "idle")
    tmux.run(one, "kill-session", "-t", "=idler")
    # Its spec edited by hand (as in a registry from a clone): restore would ask on a terminal; here it is refused.
    document = yaml.safe_load(ws.registry.read_text())
    document["sessions"][0]["spec"]["args"] = ["-c", "exec sleep 600"]
    ws.write_registry(yaml.safe_dump(document, sort_keys=False))
    client, _ = served(ws)
    with client:
        refused = client.post("/api/agents/idler/restore", json={}, headers=csrf(client))
        assert refused.status_code == 409, refused.text
        assert refused.json()["document"]["agents"][0]["outcome"] == "untrusted", refused.text
    assert tmux.run(one, "has-session", "-t", "=idler", check=False).returncode != 0


def test_every_guard_refuses_and_nothing_is_acted_on(ws: Workspace, tmux: Tmux) -> None:
    one = tmux.name()
    spawn(ws, "idler", one, "gemini", "gemini", "idle")
    client, _ = served(ws)
    with client:
        headers = csrf(client)
        body = {"text": "owned", "enter": True}
        # A forged Host (DNS rebinding): 400 on every route, the page too.
        for path in ("/", "/api/session", "/api/fleet", "/metrics"):
            assert client.get(path, headers={"host": "evil.example:18765"}).status_code == 400
        assert client.post("/api/agents/idler/send", json=body,
                           headers={**headers, "host": "evil.example:18765"}).status_code == 400
        # Cross-origin, or no Origin from the page, or no or a wrong CSRF token: 403.
        assert client.post("/api/agents/idler/send", json=body,
                           headers={**headers, "origin": "http://evil.example"}).status_code == 403
        assert client.post("/api/agents/idler/send", json=body,
                           headers={"x-csrf-token": headers["x-csrf-token"]}).status_code == 403
        assert client.post("/api/agents/idler/send", json=body, headers=ORIGIN).status_code == 403
        # A script's first try, on a server without a token: told how to get one.
        scripted = client.post("/api/agents/idler/send", json=body, headers={"x-csrf-token": "x"}).json()
        assert "--token-file" in scripted["hint"] and "Bearer" in scripted["hint"], scripted
        assert client.post("/api/agents/idler/send", json=body,
                           headers={**ORIGIN, "x-csrf-token": "x" * 43}).status_code == 403
        # Names with controls, `..` or `/`: refused before anything; a file outside static/: 404.
        for name in ("idl%1Ber", "..", "%2E%2E", "a%0Ab"):
            answer = client.post(f"/api/agents/{name}/send", json=body, headers=headers)
            assert answer.status_code in (400, 404), (name, answer.status_code)
            assert answer.status_code == 400 or name == "..", name
        assert client.get("/static/..%2F..%2Fguard.py").status_code == 404
        assert client.get("/static/../routes.py").status_code == 404
        assert client.get("/static/%2E%2E").status_code == 404
        # An oversized body: 413, declared or not.
        big = json.dumps({"text": "x" * (MAX_BODY + 1)})
        assert client.post("/api/agents/idler/send", content=big,
                           headers={**headers, "content-type": "application/json"}).status_code == 413

        def chunks() -> Iterator[bytes]:
            for _ in range(MAX_BODY // 1024 + 2):
                yield b"x" * 1024
        assert client.post("/api/agents/idler/send", content=chunks(), headers=headers).status_code == 413
        # Not JSON, or the wrong types: 400.
        assert client.post("/api/agents/idler/send", content=b"{", headers=headers).status_code == 400
        assert client.post("/api/agents/idler/send", json={"text": 3}, headers=headers).status_code == 400
        time.sleep(1)
        assert "owned" not in screen(tmux, one, "idler")
        # The security headers on every answer.
        page = client.get("/")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        # The page's session cookie: HttpOnly, SameSite=Strict.
        client.cookies.clear()
        cookie = client.get("/api/session").headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()


def test_a_token_is_asked_of_every_route_and_failures_lock(ws: Workspace, tmux: Tmux) -> None:
    one = tmux.name()
    spawn(ws, "idler", one, "gemini", "gemini", "idle")
    client, serve = served(ws, token=TOKEN)
    with client:
        for path in ("/api/session", "/api/status", "/api/fleet", "/api/events", "/metrics",
                     "/api/agents/idler/peek", "/api/openapi.json"):
            assert client.get(path).status_code == 401, path
        assert client.get("/", follow_redirects=False).headers["location"] == "/login"
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert client.get("/api/fleet", headers=bearer).status_code == 200
        assert client.get("/metrics", headers=bearer).status_code == 200
        # A bearer API client needs no CSRF token, and may send no Origin; a foreign Origin is still refused.
        sent = client.post("/api/agents/idler/send", json={"text": "by api", "enter": True}, headers=bearer)
        assert sent.status_code == 200, sent.text
        assert client.post("/api/agents/idler/send", json={"text": "x"},
                           headers={**bearer, "origin": "http://evil.example"}).status_code == 403
        # The login page's cookie: HttpOnly, SameSite=Strict; then the page's CSRF token is needed.
        login = client.post("/login", data={"token": TOKEN}, headers=ORIGIN, follow_redirects=False)
        assert login.status_code == 303, login.text
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        session = client.get("/api/session").json()
        assert session["csrf"] and session["read_only"] is False and session["token_required"] is True
        assert client.post("/api/agents/idler/send", json={"text": "x"}, headers=ORIGIN).status_code == 403
        assert client.post("/api/agents/idler/send", json={"text": "by page", "enter": True},
                           headers={**ORIGIN, "x-csrf-token": session["csrf"]}).status_code == 200
        client.post("/logout", headers=ORIGIN)
        assert client.get("/api/fleet").status_code == 401
        # Wrong tokens: 401, then the address is locked (429), the right token too.
        for _ in range(MAX_FAILURES):
            assert client.post("/login", data={"token": "wrong-token-0000000000"}, headers=ORIGIN,
                               follow_redirects=False).status_code == 401
        assert client.post("/login", data={"token": TOKEN}, headers=ORIGIN).status_code == 429
        assert client.get("/api/fleet", headers=bearer).status_code == 429
    until(lambda: "got: by page" in screen(tmux, one, "idler"))
    assert "got: by api" in screen(tmux, one, "idler") and "got: by page" in screen(tmux, one, "idler")
    # Each action in the audit trail as serve's, from the client's address, with the token's id, never the token.
    trail = (ws.root / ".mam" / "audit.jsonl").read_text()
    assert TOKEN not in trail
    sends = [json.loads(line) for line in trail.splitlines() if json.loads(line)["action"] == "send"]
    assert [(e["face"], e["client"], e["token_id"], e["result"]) for e in sends] == \
        [("serve", "testclient", token_id(TOKEN), "ok")] * 2, sends


def test_read_only_serves_views_and_no_action(ws: Workspace, tmux: Tmux) -> None:
    one = tmux.name()
    spawn(ws, "idler", one, "gemini", "gemini", "idle")
    client, _ = served(ws, read_only=True)
    with client:
        headers = csrf(client)
        assert client.get("/api/session").json()["read_only"] is True
        assert client.get("/api/status").status_code == 200
        assert client.get("/api/agents/idler/peek").status_code == 200
        for verb, body in (("send", {"text": "ro", "enter": True}), ("answer", {"text": "1"}),
                           ("stop", {"confirm": True}), ("restore", {})):
            refused = client.post(f"/api/agents/idler/{verb}", json=body, headers=headers)
            assert refused.status_code == 403 and "read-only" in refused.json()["error"], verb
    assert tmux.run(one, "has-session", "-t", "=idler", check=False).returncode == 0
    assert "got: ro" not in screen(tmux, one, "idler")


def test_odd_input_is_refused_and_even_a_crash_carries_the_security_headers(
        ws: Workspace, tmux: Tmux, monkeypatch: pytest.MonkeyPatch) -> None:
    one = tmux.name()
    spawn(ws, "idler", one, "gemini", "gemini", "idle")
    client, _ = served(ws)
    with client:
        # `²` passes str.isdigit() and not int(): a 400 that says so, not a crash.
        odd = client.get("/api/agents/idler/peek", params={"lines": "\u00b2"})
        assert odd.status_code == 400 and "lines" in odd.json()["error"], odd.text
        long = client.get("/api/agents/" + "x" * 300 + "/peek")
        assert long.status_code == 400 and "at most 200 characters" in long.json()["error"]

    def broken(*args: object) -> None:
        raise RuntimeError("a bug")
    monkeypatch.setattr("mam.web.routes.peek_document", broken)
    client, _ = served(ws)
    client = TestClient(client.app, base_url=BASE, raise_server_exceptions=False)
    with client:
        crashed = client.get("/api/agents/idler/peek")
        assert crashed.status_code == 500
        assert "default-src 'self'" in crashed.headers["content-security-policy"], crashed.headers
        assert crashed.headers["x-content-type-options"] == "nosniff"


def test_another_sites_page_cannot_spend_sessions_or_streams(ws: Workspace, tmux: Tmux) -> None:
    """Without a token, a page on any site the user visits could GET /api/session a thousand times (each a new
    session: the page's own, with its CSRF token, evicted) or hold /api/events open by <img> tags (the page's
    stream then 503). The browser says where a request comes from (Sec-Fetch-Site): another site is refused."""
    client, serve = served(ws)
    with client:
        page = csrf(client)
        for site in ("cross-site", "same-site"):
            for path in ("/api/session", "/api/events", "/api/fleet", "/metrics"):
                refused = client.get(path, headers={"sec-fetch-site": site, "sec-fetch-mode": "no-cors"})
                assert refused.status_code == 403, (site, path)
                assert "default-src 'self'" in refused.headers["content-security-policy"]
        assert len(serve.guard._sessions) == 1 and serve.hub.clients == 0
        # A form on another site posts as a navigation: refused all the same.
        assert client.post("/login", data={"token": "x"}, headers={"sec-fetch-site": "cross-site",
                                                                   "sec-fetch-mode": "navigate"}).status_code == 403
        # A link to the page from elsewhere still opens it; the page's own requests are served.
        assert client.get("/", headers={"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"}
                          ).status_code == 200
        assert client.get("/api/session", headers={"sec-fetch-site": "same-origin"}).json()["csrf"] == \
            page["x-csrf-token"]


def test_status_asks_no_host_the_registry_does_not_name(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """`?host=H&server=S` would make this machine ssh to H with the user's keys: a --read-only viewer (or, in a
    browser that sends no Sec-Fetch-Site, any site's <img>) choosing where. Only hosts the registry names."""
    fakes = tmp_path / "fake-ssh"
    fakes.mkdir()
    called = tmp_path / "ssh-called"
    (fakes / "ssh").write_text(f"#!/bin/sh\necho \"$@\" >> {called}\nexit 255\n")
    (fakes / "ssh").chmod(0o755)
    ws.env["PATH"] = f"{fakes}:{ws.env['PATH']}"
    client, _ = served(ws, read_only=True)
    with client:
        refused = client.get("/api/status", params={"host": "attacker.example", "server": "x"})
        assert refused.status_code == 422 and "attacker.example" in refused.json()["error"], refused.text
        assert client.get("/api/status", params={"host": "local", "server": "x"}).status_code == 200
        assert client.get("/api/status").status_code == 200
    assert not called.exists(), called.read_text()


def test_openapi_lists_exactly_the_routes(ws: Workspace, tmux: Tmux) -> None:
    client, serve = served(ws)
    web = client.app
    routes = {(method.lower(), route.path) for route in web.routes  # type: ignore[attr-defined]
              for method in (route.methods or ()) if method != "HEAD"}
    doc = document()
    listed = {(method, path) for path, item in doc["paths"].items() for method in item}
    assert listed == routes
    assert doc["openapi"].startswith("3.")
    with client:
        assert client.get("/api/openapi.json").json() == json.loads(json.dumps(doc))


def test_the_event_queue_drops_the_oldest_for_a_slow_reader() -> None:
    import asyncio

    from mam.web.hub import QUEUE, _put

    async def fill() -> list[tuple[str, str]]:
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(QUEUE)
        _put(queue, [("change", str(i)) for i in range(QUEUE * 3)])
        return [queue.get_nowait() for _ in range(queue.qsize())]
    kept = asyncio.run(fill())
    assert len(kept) == QUEUE and kept[-1] == ("change", str(QUEUE * 3 - 1))


def test_the_fleet_tells_how_an_agent_ended_before_its_row_does(ws: Workspace, tmux: Tmux) -> None:
    """An agent whose program exited while its row still says `running` (no `reconcile --apply` yet): `mam status
    --json` says `end` `finished` at once, and so do the fleet and, to a watch of `done`, its change stream."""
    from mam.live.changes import Changes
    from mam.live.topmodel import as_sessions

    server = tmux.name()
    proc = ws.mam("spawn", "quitter", "--server", server, "--command", "sh -c 'sleep 4; echo all done'")
    assert proc.returncode == 0, proc.stderr
    client, serve = served(ws)
    with client:
        until(lambda: [r.live for r in serve.hub.poller.snapshot()[0]] == ["alive"])
        track = Changes()
        assert track.step(as_sessions(serve.hub.poller.snapshot()[0])) == []  # the baseline: it runs

        def row() -> dict[str, object]:
            found: dict[str, object] = client.get("/api/fleet").json()["rows"][0]
            return found

        until(lambda: row()["end"] == "finished")
        assert (row()["name"], row()["status"], row()["end"]) == ("quitter", "running", "finished")
        told = track.step(as_sessions(serve.hub.poller.snapshot()[0]))
        assert [(c["name"], c["to"]) for c in told] == [("quitter", "done")]


def test_a_route_that_is_not_there_answers_in_the_error_shape(open_client: TestClient) -> None:
    """A script that asks a wrong path or method gets the same `{"error", "exit", "hint"}` as every refusal
    (Starlette's own answers were a plain-text `Not Found` / `Method Not Allowed`)."""
    missing = open_client.get("/api/agent/x/peek")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("application/json")
    assert missing.json()["error"] == "no such route: GET /api/agent/x/peek"
    assert "openapi.json" in missing.json()["hint"]
    wrong = open_client.delete("/api/status")
    assert wrong.status_code == 405 and wrong.json()["error"].startswith("DELETE is not allowed here"), wrong.text
    assert "GET" in wrong.headers["allow"]
    assert "default-src 'self'" in missing.headers["content-security-policy"]
