"""What any HTTP client may cost the server before it has said who it is: bodies and connections, bounded.

Bodies (`BodyLimit`, the outermost ASGI layer): every route has a cap, checked against Content-Length before
the app runs and counted while a body streams in (chunked bodies too), so no route reads past it; a body must
arrive within BODY_TIMEOUT_S; multipart is refused everywhere (no route takes files).

Connections (`guarded_http`, uvicorn's httptools protocol with two additions): a request's headers must be
complete within the header timeout of the connection opening or of the previous response (so neither a
half-open connection nor one kept alive and dribbling holds a descriptor for long), and at most
`max_connections` are open at once: past it, the oldest connection that is waiting for headers (half-open or
idle between requests) is closed to make room, so a flood of half-open connections costs real requests nothing.
"""

from __future__ import annotations

import asyncio
import json
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from conductor_mcp.core.limits import MAX_BODY_BYTES, MAX_FORM_BODY_BYTES, MAX_MCP_MESSAGE_BYTES, MAX_OTHER_BODY_BYTES
from conductor_mcp.doors import viewer_html as html
from conductor_mcp.logs import get_logger

log = get_logger(__name__)

BODY_TIMEOUT_S = 60.0
# uvicorn closes a connection idle this long after a response (the header timeout, 10 s by default, ends one too).
# Longer than httpx's keep-alive expiry (5 s; the MCP SDK's client): when both were 5 s, a client could send its
# POST on a connection the server was closing, and the call failed with a ReadError.
KEEP_ALIVE_S = 10
MAX_CONNECTIONS = 1000  # and never more than half the process's descriptors


BODY_LIMITS = {
    "/mcp": MAX_MCP_MESSAGE_BYTES,
    "/v1/responses": MAX_BODY_BYTES,
    "/v1/chat/completions": MAX_BODY_BYTES,
    "/ui/login": MAX_FORM_BODY_BYTES,
}


def body_limit(path: str) -> int:
    return BODY_LIMITS.get(path.rstrip("/") or "/", MAX_OTHER_BODY_BYTES)


class _BodyRefused(Exception):
    """Raised into the app from `receive` when a body goes over its cap or its time: the app stops reading."""


async def refuse(send: Any, path: str, status: int, message: str) -> None:
    """An error in the door's own shape: a page under /ui, OpenAI's error object elsewhere."""
    if path == "/ui" or path.startswith("/ui/"):
        kind, body = b"text/html; charset=utf-8", html.message_page("Request refused", message).encode()
    else:
        code = {408: "request_timeout", 413: "request_too_large", 415: "unsupported_media_type"}.get(status, "refused")
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
        kind, body = b"application/json", json.dumps({"error": error}).encode()
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Caps every request body (see the module's docstring) before any route or middleware parses it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, limit = scope.get("path", ""), body_limit(scope.get("path", ""))
        headers = dict(scope.get("headers") or [])
        if headers.get(b"content-type", b"").strip().lower().startswith(b"multipart/"):
            return await refuse(send, path, 415, "multipart bodies are not accepted: send JSON (a form for sign-in)")
        declared = headers.get(b"content-length", b"0").strip()
        if not declared.isdigit() or int(declared) > limit:
            return await refuse(
                send,
                path,
                413,
                f"body: {declared.decode(errors='replace')} bytes, over the limit of {limit} for {path}",
            )
        await _LimitedRequest(self.app, path, limit).run(scope, receive, send)


class _LimitedRequest:
    """One request's body, counted as the app reads it; once refused, the app's own answer is replaced by ours."""

    def __init__(self, app: Any, path: str, limit: int) -> None:
        self.app, self.path, self.limit = app, path, limit
        self.size, self.more = 0, True
        self.deadline = asyncio.get_running_loop().time() + BODY_TIMEOUT_S
        self.refused: tuple[int, str] | None = None
        self.started = False

    async def run(self, scope: Any, receive: Any, send: Any) -> None:
        async def limited_receive() -> Any:
            if not self.more:  # the body is in: what follows (a disconnect) may take as long as the response
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.deadline - asyncio.get_running_loop().time())
            except TimeoutError:
                self.refused = (408, f"body: not received within {BODY_TIMEOUT_S:g} s")
                raise _BodyRefused from None
            if message["type"] == "http.request":
                self.size += len(message.get("body", b""))
                self.more = bool(message.get("more_body"))
                if self.size > self.limit:
                    self.refused = (413, f"body: over the limit of {self.limit} bytes for {self.path}")
                    raise _BodyRefused
            return message

        async def guarded_send(message: Any) -> None:
            if self.refused is not None:
                return  # the app's answer to a body it could not finish reading: ours goes out instead
            self.started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyRefused:
            pass
        except Exception:
            if self.refused is None:
                raise
        if self.refused is not None and not self.started:
            log.info("http_body_refused", path=self.path, status=self.refused[0], size=self.size)
            await refuse(send, self.path, *self.refused)


def connection_cap(configured: int | None = None) -> int:
    """How many connections may be open: the setting, else MAX_CONNECTIONS, and at most half the descriptors
    this process may open (the rest are for the store, model clients, agents and logs)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    half = soft // 2 if soft != resource.RLIM_INFINITY else MAX_CONNECTIONS
    return max(1, min(configured or MAX_CONNECTIONS, half))


def guarded_http(header_timeout_s: float, max_connections: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a header timeout and a connection cap shared by one server's
    connections (pass as `uvicorn.Config(http=...)`)."""
    waiting: dict[GuardedHttpProtocol, None] = {}  # connections waiting for headers, oldest first
    open_: set[GuardedHttpProtocol] = set()

    class GuardedHttpProtocol(HttpToolsProtocol):
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            open_.add(self)
            self._await_headers()
            if len(open_) > max_connections:
                oldest = next((c for c in waiting if c is not self), self)
                log.warning("http_connection_evicted", open=len(open_), cap=max_connections)
                oldest._close(503 if oldest is self else None)

        def connection_lost(self, exc: Exception | None) -> None:
            open_.discard(self)
            self._headers_arrived()
            super().connection_lost(exc)

        def on_headers_complete(self) -> None:
            self._headers_arrived()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self._await_headers()  # kept alive: the next request's headers are timed too

        def _await_headers(self) -> None:
            if self.header_timer is None:
                self.header_timer = self.loop.call_later(header_timeout_s, self._close, 408)
                waiting[self] = None

        def _headers_arrived(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None
            waiting.pop(self, None)

        def _close(self, status: int | None) -> None:
            """Close a connection that has no request under way, telling the client why when `status`."""
            self._headers_arrived()
            if not self.transport.is_closing():
                if status is not None:
                    reason = b"Request Timeout" if status == 408 else b"Service Unavailable"
                    head = b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % (status, reason)
                    self.transport.write(head)
                self.transport.close()

    return GuardedHttpProtocol
