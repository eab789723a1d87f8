"""The ASGI app of `mam serve` (Starlette): the page's files, the views, the actions, the event stream and the
metrics, each behind the guard's checks (docs/serve.md). Every action runs the code of the CLI command of the same
name, with its refusals and its JSON document."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mam import audit
from mam.agents.peeking import peek_document
from mam.agents.statusview import parse_state_filter, status_document
from mam.commands.interact import send_document
from mam.commands.lifecycle import stop_document
from mam.commands.restore import restore_document
from mam.live.actions import Actions
from mam.servers.hosts import checked_host, host_key
from mam.util.errors import EXIT_BAD_INPUT, MamError
from mam.web.guard import MAX_BODY, MAX_NAME, Guard, Session, name_ok
from mam.web.hub import Hub, Observer
from mam.web.metrics import CONTENT_TYPE, Metrics
from mam.web.openapi import document

STATIC = Path(__file__).parent / "static"
COOKIE = "mam_session"
BODY_SECONDS = 10.0  # a request's body arrives within this, else 408
HEARTBEAT = 15.0  # seconds between the event stream's comments, which keep proxies and the browser's link open
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                 b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                                 b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


@dataclass
class Serve:
    """What the routes share: the guard, the poller's hub, the actions (the CLI's code) and the metrics."""

    guard: Guard
    hub: Hub
    actions: Actions
    metrics: Metrics
    user: str = ""


def problem(status: int, message: str, exit_code: int = EXIT_BAD_INPUT, **more: Any) -> JSONResponse:
    """An error as every route says it: one line, and the exit code the CLI would have ended with."""
    return JSONResponse({"error": " ".join(message.split()), "exit": exit_code, **more}, status_code=status)


def from_error(exc: MamError) -> JSONResponse:
    """A refusal of the CLI's code, as HTTP: bad input 422, an agent not registered 404, the rest (a prompt to a
    blocked agent, an answer to one that is not, a backend that failed) 409."""
    if exc.exit_code == EXIT_BAD_INPUT:
        status = 422
    elif exc.message.startswith("no registered agent named"):
        status = 404
    else:
        status = 409
    return problem(status, exc.message, exc.exit_code, hint=exc.hint)


class Shield:
    """Before any route: the Host must be one of the bound names (DNS rebinding), a declared body must fit, and
    only HTTP is spoken; every response carries the security headers."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websocket
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        started = False

        async def secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        host = headers.get(b"host", b"").decode("latin-1")
        if not self.guard.host_ok(host):
            await problem(400, f"Host {host!r} is not one this server is bound to")(scope, receive, secured)
            return
        site = headers.get(b"sec-fetch-site", b"")
        followed = scope["method"] in ("GET", "HEAD") and headers.get(b"sec-fetch-mode") == b"navigate"
        if site in (b"cross-site", b"same-site") and not followed:
            # Another site's page (another port of 127.0.0.1 is same-site) reaching in by an <img> or a fetch: no
            # cookie goes with it, but without a token it would still make sessions (evicting the page's, its
            # CSRF token with it) or hold event streams (the page's then 503). A link followed to the page is fine.
            await problem(403, "a request from another site's page is refused")(scope, receive, secured)
            return
        length = headers.get(b"content-length", b"0").decode("latin-1")
        if not (length.isascii() and length.isdigit()) or int(length) > MAX_BODY:
            await problem(413, f"a request body is at most {MAX_BODY} bytes")(scope, receive, secured)
            return
        try:
            await self.app(scope, receive, secured)
        except Exception:
            if not started:  # Starlette's own 500 would go out without the security headers
                await problem(500, "internal error: mam serve's output says more", 1)(scope, receive, secured)
            raise


async def read_body(request: Request) -> bytes | Response:
    """The body; a refusal past MAX_BODY (a chunked body declares no length) or when it takes over BODY_SECONDS."""
    async def read() -> bytes | None:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return None
        return body

    try:
        body = await asyncio.wait_for(read(), BODY_SECONDS)
    except TimeoutError:
        return problem(408, f"the request's body took over {BODY_SECONDS:g} s")
    return problem(413, f"a request body is at most {MAX_BODY} bytes") if body is None else body


@dataclass
class Caller:
    how: str  # bearer, cookie, or open (loopback without a token)
    session: Session | None
    sid: str | None
    client: str


def client_of(request: Request) -> str:
    return request.client.host if request.client else "-"


def who(request: Request, serve: Serve) -> Caller | Response:
    """The caller, or the refusal: with a token configured, its bearer header or a logged-in session; without one
    (loopback only), anyone who reached the port, with the session of the page if it has one."""
    guard, client = serve.guard, client_of(request)
    sid = request.cookies.get(COOKIE)
    session = guard.session(sid)
    auth = request.headers.get("authorization", "")
    if guard.token is None:
        return Caller("open", session, sid if session else None, client)
    if auth:
        if guard.locked(client):
            return problem(429, "too many failed logins from this address: try again later")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() == "bearer" and guard.token_ok(given.strip()):
            guard.succeeded(client)
            return Caller("bearer", None, None, client)
        guard.failed(client)
        return problem(401, "wrong token")
    if session is not None and session.authed:
        return Caller("cookie", session, sid, client)
    return problem(401, "log in first: POST /login, or send Authorization: Bearer TOKEN")


def may_change(request: Request, serve: Serve, caller: Caller) -> Response | None:
    """A request that changes something: none at all --read-only; its Origin the page's own (absent only from an
    API client with the bearer token); the page's CSRF token in X-CSRF-Token."""
    if serve.guard.read_only:
        return problem(403, "this server is read-only (mam serve --read-only)", 1)
    origin = request.headers.get("origin")
    if origin is not None and not serve.guard.origin_ok(origin, request.headers.get("host")):
        return problem(403, f"cross-origin request from {origin!r} refused")
    if caller.how == "bearer":
        return None
    if origin is None:
        hint = None if serve.guard.token else ("this server has no token: for scripts start it with --token-file "
                                               "FILE and send Authorization: Bearer $(cat FILE)")
        return problem(403, "a request without Origin needs the bearer token", hint=hint)
    given = request.headers.get("x-csrf-token", "")
    if caller.session is None or not hmac.compare_digest(given.encode(), caller.session.csrf.encode()):
        return problem(403, "missing or wrong CSRF token (X-CSRF-Token, from GET /api/session)")
    return None


def acting(serve: Serve, caller: Caller) -> AbstractContextManager[None]:
    """The one place an action is attributed: what the command records in .mam/audit.jsonl is this face's, this
    user's, from this client address, with the token's id (a hash prefix, never the token)."""
    return audit.acting(audit.Actor(face="serve", user=serve.user, client=caller.client,
                                    token_id=serve.guard.token_id if caller.how != "open" else None))


def build(serve: Serve) -> Starlette:
    guard, hub = serve.guard, serve.hub

    def guarded(handler: Callable[[Request, Caller], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            caller = who(request, serve)
            if isinstance(caller, Response):
                return caller
            return await handler(request, caller)
        return endpoint

    def page_file(name: str) -> Response:
        path = STATIC / name
        if not path.is_file():
            return problem(404, f"no file {name}")
        return FileResponse(path)

    async def index(request: Request) -> Response:
        caller = who(request, serve)
        if isinstance(caller, Response):
            return RedirectResponse("/login", status_code=303)
        return page_file("index.html")

    async def static(request: Request) -> Response:
        name = request.path_params["file"]
        if not name_ok(name) or name.startswith(".") or name not in _static_files():
            return problem(404, f"no file {name!r}")
        return page_file(name)

    async def login_page(request: Request) -> Response:
        return page_file("login.html")

    async def login(request: Request) -> Response:
        client = client_of(request)
        origin = request.headers.get("origin")
        if origin is not None and not guard.origin_ok(origin, request.headers.get("host")):
            return problem(403, f"cross-origin request from {origin!r} refused")
        if guard.locked(client):
            return problem(429, "too many failed logins from this address: try again later")
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        if guard.locked(client):  # again: logins sent at once all passed the first look while their bodies came
            return problem(429, "too many failed logins from this address: try again later")
        given = (parse_qs(body.decode("utf-8", "replace")).get("token") or [""])[0].strip()
        html = "text/html" in request.headers.get("accept", "")
        if guard.token is not None and not guard.token_ok(given):
            guard.failed(client)
            if html:
                return RedirectResponse("/login?failed=1", status_code=303)
            return problem(401, "wrong token")
        guard.succeeded(client)
        response = RedirectResponse("/", status_code=303)
        set_session(response, guard.new_session(authed=guard.token is not None))
        return response

    async def logout(request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and not guard.origin_ok(origin, request.headers.get("host")):
            return problem(403, f"cross-origin request from {origin!r} refused")
        guard.end_session(request.cookies.get(COOKIE))
        response = RedirectResponse("/login" if guard.token is not None else "/", status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @guarded
    async def session(request: Request, caller: Caller) -> Response:
        sid, current = caller.sid, caller.session
        if caller.how == "open" and current is None:
            sid = guard.new_session(authed=False)
            current = guard.session(sid)
        doc = {"schema": 1, "csrf": current.csrf if current else None, "read_only": guard.read_only,
               "user": serve.user, "token_required": guard.token is not None}
        response = JSONResponse(doc)
        if sid and sid != caller.sid:
            set_session(response, sid)
        return response

    @guarded
    async def status(request: Request, caller: Caller) -> Response:
        q = request.query_params

        def read() -> dict[str, Any]:
            registry = serve.actions.registry()  # off the event loop, shared with the poller
            there = host_key(checked_host(q.get("host")))
            if there and not any(row.host == there for row in registry.rows):
                # `mam status --host H --server S` asks H over ssh, as the user's own choice at a terminal; a
                # request (a --read-only viewer's too) makes this machine ssh only where the registry already does.
                raise MamError("usage", f"no registered agent on host {there}: mam serve asks only the hosts "
                                        "the registry names")
            return status_document(serve.actions.app, q.getlist("server"), with_state=True, only_states=only,
                                   host=q.get("host"), registry=registry)
        try:
            only = parse_state_filter(q.getlist("state"))
            doc = await run_in_threadpool(read)
        except MamError as exc:
            return from_error(exc)
        return JSONResponse(doc)

    @guarded
    async def fleet(request: Request, caller: Caller) -> Response:
        return JSONResponse(hub.fleet)

    @guarded
    async def events(request: Request, caller: Caller) -> Response:
        client = hub.join()
        if client is None:
            return problem(503, f"at most {hub.max_clients} event streams at once", 1)

        async def stream() -> AsyncIterator[str]:
            try:
                while True:
                    try:
                        kind, data = await asyncio.wait_for(client.queue.get(), HEARTBEAT)
                    except TimeoutError:
                        kind, data = "", ""
                    if caller.how == "cookie" and guard.session(caller.sid) is None:
                        return  # logged out, or the login expired: the stream ends with it (the page asks again)
                    yield f"event: {kind}\ndata: {data}\n\n" if kind else ": heartbeat\n\n"
            finally:
                hub.leave(client)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    def target(request: Request) -> tuple[str, str | None, str | None] | Response:
        name = request.path_params["name"]
        if not name_ok(name):
            return problem(400, f"an agent's name is at most {MAX_NAME} characters, has no control characters, `/` "
                                "or `\\`, and is not . or ..")
        q = request.query_params
        return name, q.get("server") or None, q.get("host") or None

    @guarded
    async def peek(request: Request, caller: Caller) -> Response:
        found = target(request)
        if isinstance(found, Response):
            return found
        name, server, host = found
        lines = request.query_params.get("lines", "40")
        if not (lines.isascii() and lines.isdigit()):  # `²` is a digit that int() refuses
            return problem(400, "lines: expected a number from 1 to 10000")
        try:
            return JSONResponse(await run_in_threadpool(peek_document, serve.actions.app, name, int(lines), server,
                                                        host))
        except MamError as exc:
            return from_error(exc)

    def action(run: Callable[[str, str | None, str | None, dict[str, Any]], dict[str, Any] | Response]
               ) -> Callable[[Request], Awaitable[Response]]:
        @guarded
        async def endpoint(request: Request, caller: Caller) -> Response:
            refused = may_change(request, serve, caller)
            if refused is not None:
                return refused
            found = target(request)
            if isinstance(found, Response):
                return found
            body = await read_body(request)
            if isinstance(body, Response):
                return body
            try:
                given = json.loads(body or b"{}")
            except (ValueError, UnicodeDecodeError):
                return problem(400, "the body is not JSON")
            if not isinstance(given, dict):
                return problem(400, "the body is a JSON object")

            def call() -> dict[str, Any] | Response:
                with acting(serve, caller):
                    return run(*found, given)
            try:
                result = await run_in_threadpool(call)
            except MamError as exc:
                return from_error(exc)
            finally:
                hub.kick()
            return result if isinstance(result, Response) else JSONResponse(result)
        return endpoint

    def text_of(given: dict[str, Any]) -> str | Response:
        text = given.get("text", "")
        return text if isinstance(text, str) else problem(400, "text: expected a string")

    def send(name: str, server: str | None, host: str | None, given: dict[str, Any]) -> dict[str, Any] | Response:
        text, enter = text_of(given), given.get("enter", False)
        if isinstance(text, Response):
            return text
        if not isinstance(enter, bool):
            return problem(400, "enter: expected true or false")
        return send_document(serve.actions.app, name, text, enter, server, host)

    def answer(name: str, server: str | None, host: str | None, given: dict[str, Any]) -> dict[str, Any] | Response:
        text = text_of(given)
        if isinstance(text, Response):
            return text
        return send_document(serve.actions.app, name, text, True, server, host, answer=True)

    def stop(name: str, server: str | None, host: str | None, given: dict[str, Any]) -> dict[str, Any] | Response:
        if given.get("confirm") is not True:
            return problem(400, 'stopping an agent takes {"confirm": true}')
        return stop_document(serve.actions.app, name, server, host=host)

    def restore(name: str, server: str | None, host: str | None, given: dict[str, Any]
                ) -> dict[str, Any] | Response:
        doc = restore_document(serve.actions.app, [name], server=server, host=host)  # no --trust-spec: refused
        serve.metrics.restored(doc)
        counts = doc["counts"]
        if counts["failed"] or counts["skipped"] or counts["untrusted"]:
            said = "; ".join(f"{a['name']}: {a['outcome']}: {a['message']}" for a in doc["agents"])
            return problem(409, said or f"{name}: not restored", 1, document=doc)
        return doc

    @guarded
    async def metrics(request: Request, caller: Caller) -> Response:
        if guard.token is None and not guard.bind.loopback:  # cannot happen (serve refuses it); said anyway
            return problem(403, "metrics are served on loopback only, or with the token")
        return Response(serve.metrics.text(), media_type=CONTENT_TYPE)

    async def openapi(request: Request) -> Response:
        caller = who(request, serve)
        if isinstance(caller, Response):
            return caller
        return JSONResponse(document())

    routes = [
        Route("/", index, methods=["GET"]),
        Route("/static/{file}", static, methods=["GET"]),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/api/session", session, methods=["GET"]),
        Route("/api/status", status, methods=["GET"]),
        Route("/api/fleet", fleet, methods=["GET"]),
        Route("/api/events", events, methods=["GET"]),
        Route("/api/agents/{name}/peek", peek, methods=["GET"]),
        Route("/api/agents/{name}/send", action(send), methods=["POST"]),
        Route("/api/agents/{name}/answer", action(answer), methods=["POST"]),
        Route("/api/agents/{name}/stop", action(stop), methods=["POST"]),
        Route("/api/agents/{name}/restore", action(restore), methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/api/openapi.json", openapi, methods=["GET"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hub.start()
        try:
            yield
        finally:
            hub.stop()

    async def no_route(request: Request, exc: Exception) -> Response:
        # Starlette's own 404 and 405 are plain text: a script gets the error shape every route answers with.
        status = int(getattr(exc, "status_code", 404))
        what = "no such route" if status == 404 else f"{request.method} is not allowed here"
        response = problem(status, f"{what}: {request.method} {request.url.path}",
                           hint="GET /api/openapi.json lists the routes and their methods")
        response.headers.update(getattr(exc, "headers", None) or {})  # a 405's Allow
        return response

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: no_route, 405: no_route})
    app.add_middleware(Shield, guard=guard)
    return app


def set_session(response: Response, sid: str) -> None:
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/")


def _static_files() -> frozenset[str]:
    """The page's own files, as shipped: a name not among them is never opened."""
    try:
        return frozenset(p.name for p in STATIC.iterdir() if p.is_file())
    except OSError:
        return frozenset()


def make(actions: Actions, guard: Guard, interval: float = 1.0, max_streams: int = 100) -> tuple[Starlette, Serve]:
    metrics = Metrics()

    hub = Hub(actions, interval, max_streams, Observer(metrics.snapshot, metrics.polled))
    metrics.streams.set_function(lambda: hub.clients)
    serve = Serve(guard, hub, actions, metrics, audit.os_user())
    return build(serve), serve
