"""`mam serve` running: the app on uvicorn, bounded against slow and numerous clients."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from mam.live.actions import Actions
from mam.util.errors import MamError
from mam.web.guard import MAX_STREAMS, Guard
from mam.web.routes import make

READ_TIMEOUT = 10.0  # seconds a new connection has to send its request's headers
KEEP_ALIVE = 5  # seconds an idle connection is kept between requests
# Connections and requests at once, past which uvicorn answers 503: the event streams and room for the rest.
CONCURRENCY = MAX_STREAMS + 50


class BoundedH11(H11Protocol):
    """uvicorn's HTTP/1.1, with a time limit on each request's headers (uvicorn has one only until the first byte
    of the next request): a client sending a byte a minute holds a connection READ_TIMEOUT seconds, not forever,
    on a new connection or after an answer on a kept-alive one."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._slow = self.loop.call_later(READ_TIMEOUT, self._too_slow)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may already have begun a pipelined request: then nothing is waited on
        self._slow.cancel()
        self._slow = self.loop.call_later(READ_TIMEOUT, self._too_slow)

    def _too_slow(self) -> None:
        waiting = self.cycle is None or self.cycle.response_complete  # no request begun since the last answer
        if waiting and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._slow.cancel()
        super().connection_lost(exc)


def run(actions: Actions, guard: Guard, ready: Any = None) -> None:
    app, _ = make(actions, guard, max_streams=MAX_STREAMS)
    # proxy_headers off: no X-Forwarded-For believed, the rate limit counts the address that connected.
    config = uvicorn.Config(app, host=guard.bind.address, port=guard.bind.port, http=BoundedH11, ws="none",
                            lifespan="on", log_level="warning", access_log=False, server_header=False,
                            proxy_headers=False, timeout_keep_alive=KEEP_ALIVE, limit_concurrency=CONCURRENCY,
                            h11_max_incomplete_event_size=16 * 1024, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit:  # uvicorn's exit 3 is mam's "backend not found": its failure to start said as mam says one
        if server.started:
            raise
        raise MamError("operation_failed", f"cannot serve on {guard.bind.url_host}:{guard.bind.port}: see the line "
                       "above") from None
