"""The HTTP server: transport, auth and app assembly for the doors served over HTTP (MCP at /mcp, OpenAI at /v1,
the run viewer at /ui/).

Private by default: every request needs `Authorization: Bearer <token>` (the scheme in any case, the token
compared in constant time): the admin token, from CONDUCTOR_HTTP_TOKEN or a random one kept 0600 in the state
directory, or a named token (tokens.py), each its own principal (doors/http/principals.py); serving without a token
is an explicit choice, and only on loopback. DNS-rebinding protection accepts loopback
Host headers, the ones the operator names and, bound to a wildcard address, the machine's own names. Under /ui/
a browser may instead show the viewer's session cookie (doors/viewer/routes.py); elsewhere only the header counts.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import HTTPConnection

from conductor_mcp.core.limits import GRACEFUL_SHUTDOWN_S, KEEP_ALIVE_S
from conductor_mcp.doors.http.auth import check_token
from conductor_mcp.doors.http.guards import BodyLimit, connection_cap, guarded_http
from conductor_mcp.doors.http.metrics import metrics_routes
from conductor_mcp.doors.http.principals import signed_in_user
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.doors.openai.routes import error_body, openai_routes
from conductor_mcp.doors.render import Links
from conductor_mcp.doors.viewer.routes import ViewerAuth, is_open_path, login_page, viewer_routes
from conductor_mcp.errors import RequestError, SettingsError
from conductor_mcp.runtime.logs import get_logger, register_secret
from conductor_mcp.runtime.private import open_private, private_dir, private_file

if TYPE_CHECKING:
    from conductor_mcp.service.access import Front, ReadFront

log = get_logger(__name__)

LOOPBACK_NAMES = {"localhost"}
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}
NO_TOKEN = (
    "missing or wrong bearer token: send Authorization: Bearer <CONDUCTOR_HTTP_TOKEN, or a token from "
    "`conductor-mcp tokens add`>"
)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def stored_token(path: Path) -> tuple[str, bool]:
    """The token kept in `path`, made (random, in a 0600 file) when there is none: (token, made now).

    Kept across restarts, so clients configured once keep working; deleting the file makes a new one.
    """
    private_dir(path.parent)
    token = secrets.token_urlsafe(32)
    draft = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    with open_private(draft, "x") as handle:
        handle.write(token + "\n")
    try:
        os.link(draft, path)  # appears whole or not at all: a server starting beside us reads a full token
        return token, True
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    token = private_file(path).read_text(encoding="utf-8").strip()
    if not token:
        raise SettingsError(f"{path} holds no token: delete it and start the server again to make a new one")
    return token, False


class BearerTokenMiddleware:
    """Refuses HTTP requests without `Authorization: Bearer <token>` of a token the server accepts (the admin
    token or a named one: doors/http/principals.py), authenticated by the MCP SDK's `BearerAuthBackend`; the request
    then carries the SDK's user and auth context (its principal). Viewer pages (/ui/) also accept the viewer's
    session cookie, and answer a browser without either with a sign-in page."""

    def __init__(self, app: Any, viewer: ViewerAuth) -> None:
        self.app = app
        self._next = AuthContextMiddleware(app)  # the SDK's contextvar: get_access_token() in every door
        self.viewer = viewer
        self.backend = BearerAuthBackend(viewer.credentials)
        self.throttle = viewer.throttle  # the viewer's sign-in form shares it

    async def _user(self, scope: Any, header: bytes, client: str) -> AuthenticatedUser | None:
        """The principal the Authorization header names; a wrong token presented counts against `client`."""
        authenticated = await self.backend.authenticate(HTTPConnection(scope)) if header else None
        if authenticated is None:
            if header:
                self.throttle.failed(client)
            return None
        credentials, user = authenticated
        scope["auth"] = credentials
        return user

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self._next(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        supplied, path = headers.get(b"authorization", b""), scope.get("path", "")
        client = (scope.get("client") or ("",))[0]
        if supplied and (wait := self.throttle.retry_after(client)) is not None:
            return await _refuse(send, 429, f"too many wrong tokens from {client}: retry in {wait} s", wait)
        user = await self._user(scope, supplied, client)
        if path == "/ui" or path.startswith("/ui/"):
            if user is None and (principal := self.viewer.session_principal(_cookies(headers))) is not None:
                user = signed_in_user(principal)
            if user is None and not is_open_path(path):
                return await login_page(path)(scope, receive, send)
        elif user is None:
            return await _refuse(send, 401, NO_TOKEN)
        if user is not None:
            scope["user"] = user
        await self._next(scope, receive, send)


def _cookies(headers: dict[bytes, bytes]) -> str:
    return headers.get(b"cookie", b"").decode("latin-1")


async def _refuse(send: Any, status: int, message: str, retry_after: int | None = None) -> None:
    code = "invalid_api_key" if status == 401 else "rate_limit_exceeded"
    body = json.dumps(error_body(message, "invalid_request_error", code)).encode()
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def host_patterns(name: str) -> list[str]:
    """The Host header values to accept for a name: a bare host with any port or none (a reverse proxy may send
    no port); an explicit `host:port` as given. IPv6 addresses are bracketed, as in a Host header."""
    if name.count(":") > 1 and not name.startswith("["):
        name = f"[{name}]"
    bare = name.endswith("]") if name.startswith("[") else ":" not in name
    return [name, f"{name}:*"] if bare else [name]


def machine_names() -> list[str]:
    """The names and addresses this machine answers to, for a server bound to a wildcard address: its hostname,
    what that resolves to, and the address of the interface with the default route."""
    hostname = socket.gethostname()
    names = {hostname}
    with contextlib.suppress(OSError):
        canonical, aliases, addresses = socket.gethostbyname_ex(hostname)
        names |= {canonical, *aliases, *addresses}
    with contextlib.suppress(OSError):
        names |= {str(info[4][0]) for info in socket.getaddrinfo(hostname, None)}
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # a UDP "connection" sends nothing: it only picks the route
        names.add(probe.getsockname()[0])
    return sorted({name.partition("%")[0] for name in names if name})  # no IPv6 zone ids in a Host header


def _security(host: str, token: str | None, allowed_hosts: list[str]) -> TransportSecuritySettings:
    """The Host and Origin headers to accept (DNS-rebinding guard); refuses a public bind without a token."""
    if not is_loopback(host) and not token:
        raise RequestError(
            f"host: binding to {host!r} exposes the server beyond this machine; set CONDUCTOR_HTTP_TOKEN"
        )
    if token:
        check_token(token, is_loopback(host))
    names = ["127.0.0.1", "localhost", "::1", *allowed_hosts]
    if host in WILDCARD_HOSTS:
        names += machine_names()
    elif not is_loopback(host):
        names.append(host)
    hosts = [pattern for name in names for pattern in host_patterns(name)]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
    )


def http_app(
    server: MCPServer,
    host: str,
    token: str | None,
    allowed_hosts: list[str],
    service: Front | None = None,
    viewer: ViewerAuth | None = None,
    links: Links | None = None,
) -> Any:
    """The streamable HTTP app with DNS-rebinding protection and, when a token is set, bearer auth.

    With `service`, the OpenAI-compatible door, the run viewer and /metrics are mounted beside /mcp, behind the
    same Host check and token.
    """
    security = _security(host, token, allowed_hosts)
    app = server.streamable_http_app(transport_security=security, host=host)
    viewer = viewer or ViewerAuth(token)
    if service is not None:
        guard = TransportSecurityMiddleware(security)
        app.router.routes.extend(openai_routes(service, lambda request: guard.validate_request(request), links))
        app.router.routes.extend(viewer_routes(service, viewer, lambda request: guard.validate_request(request)))
        app.router.routes.extend(metrics_routes(service, lambda r: guard.validate_request(r)))
    app.add_middleware(BodyLimit)
    return BearerTokenMiddleware(app, viewer) if token else app


def viewer_app(service: ReadFront, host: str, token: str, viewer: ViewerAuth) -> Any:
    """The run viewer alone (`conductor-mcp view`): read only, behind the Host check and its own token."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    guard = TransportSecurityMiddleware(_security(host, token, []))
    routes = viewer_routes(service, viewer, lambda request: guard.validate_request(request))
    return BearerTokenMiddleware(Starlette(routes=routes, middleware=[Middleware(BodyLimit)]), viewer)


def uvicorn_server(config: Any, on_started: Callable[[], None] | None = None) -> Any:
    """uvicorn's server, except that the SIGTERM or SIGINT that stops it is not raised again when it has stopped.

    uvicorn raises it again there, so a SIGTERM ended the process before the caller's `Service.open` block could
    close the service: runs executing were not recorded as interrupted, and the spans of runs that had just ended
    were never exported. Here the server returns, the service closes, and the process exits normally.
    `on_started` runs once it listens with its signal handlers in place: a Ctrl-C from then on stops it cleanly."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                self._captured_signals.clear()  # what uvicorn would raise again on the way out

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_started is not None:
                on_started()

    return Server(config)


def connection_limits(service: ReadFront) -> dict[str, Any]:
    """uvicorn's settings for slow and half-open connections and keep-alive (doors/http/guards.py)."""
    settings = service.settings
    protocol = guarded_http(settings.http_header_timeout_s, connection_cap(settings.http_max_connections))
    return {"http": protocol, "timeout_keep_alive": KEEP_ALIVE_S}


def base_url(host: str, port: int) -> str:
    """The address a local browser or client uses for a server bound to `host`."""
    host = "127.0.0.1" if host in WILDCARD_HOSTS else host
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def viewer_links(host: str, port: int) -> Links:
    """Where the viewer of a server bound to `host:port` shows each run."""
    return Links(f"{base_url(host, port)}/ui/")


async def serve_http(
    service: Front,
    host: str,
    port: int,
    token: str | None,
    allowed_hosts: list[str],
    viewer: ViewerAuth | None = None,
) -> None:
    """Serve the doors over HTTP until stopped (the caller's `Service.open` block then closes the service: its
    running runs become interrupted)."""
    import uvicorn

    if token:
        register_secret(token)  # masked in every log line, whatever logs it
    links = viewer_links(host, port)
    app = http_app(build_server(service, links), host, token, allowed_hosts, service, viewer, links)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        **connection_limits(service),
    )

    def listening() -> None:  # said once it listens: a script that waits for the line may connect, or stop it
        log.info(
            "http_listening",
            url=f"http://{host}:{port}/mcp",
            openai=f"http://{host}:{port}/v1",
            auth="bearer" if token else "none",
        )

    await uvicorn_server(config, on_started=listening).serve()


async def serve_viewer(
    service: ReadFront, host: str, port: int, token: str, viewer: ViewerAuth, announce: Callable[[int], None]
) -> None:
    """`conductor-mcp view`: the viewer alone on loopback until stopped. `announce` hears the port (0 picks a
    free one) once the server serves it, so the first click on the URL it prints is served, and a Ctrl-C after it
    stops the viewer cleanly (announced before uvicorn held the signals, a Ctrl-C under load cancelled its start-up
    from outside: exit 130 and tracebacks)."""
    import uvicorn

    register_secret(token)
    sock = socket.create_server((host, port))
    config = uvicorn.Config(
        viewer_app(service, host, token, viewer),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        **connection_limits(service),
    )
    port = sock.getsockname()[1]
    await uvicorn_server(config, on_started=lambda: announce(port)).serve(sockets=[sock])
