"""The HTTP server: transport, auth and app assembly for the doors served over HTTP (MCP at /mcp, OpenAI at /v1).

Bearer-token auth is compared in constant time; DNS-rebinding protection accepts loopback Host headers and the
ones the operator names; binding beyond loopback without a token is refused.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings

from conductor_mcp.doors.openai import error_body, openai_routes
from conductor_mcp.errors import RequestError
from conductor_mcp.logs import get_logger

if TYPE_CHECKING:
    from conductor_mcp.service import Service

log = get_logger(__name__)

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerTokenMiddleware:
    """Refuses HTTP requests without `Authorization: Bearer <token>` (compared in constant time)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self.expected):
                message = "missing or wrong bearer token: send Authorization: Bearer <CONDUCTOR_HTTP_TOKEN>"
                body = json.dumps(error_body(message, "invalid_request_error", "invalid_api_key")).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(
    server: MCPServer, host: str, token: str | None, allowed_hosts: list[str], service: Service | None = None
) -> Any:
    """The streamable HTTP app with DNS-rebinding protection and, when a token is set, bearer auth.

    With `service`, the OpenAI-compatible door is mounted beside /mcp, behind the same Host check and token.
    """
    if not is_loopback(host) and not token:
        raise RequestError(
            f"host: binding to {host!r} exposes the server beyond this machine; set CONDUCTOR_HTTP_TOKEN"
        )
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", *(f"{h}:*" if ":" not in h else h for h in allowed_hosts)]
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):
        hosts.append(f"{host}:*")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
    )
    app = server.streamable_http_app(transport_security=security, host=host)
    if service is not None:
        guard = TransportSecurityMiddleware(security)
        app.router.routes.extend(openai_routes(service, lambda request: guard.validate_request(request)))
    return BearerTokenMiddleware(app, token) if token else app


async def serve_http(
    server: MCPServer, service: Service, host: str, port: int, token: str | None, allowed_hosts: list[str]
) -> None:
    """Serve the doors over HTTP until stopped; then close the service (its running runs become interrupted)."""
    import uvicorn

    app = http_app(server, host, token, allowed_hosts, service)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False)
    log.info("http_listening", url=f"http://{host}:{port}/mcp", openai=f"http://{host}:{port}/v1",
             auth="bearer" if token else "none")  # fmt: skip
    try:
        await uvicorn.Server(config).serve()
    finally:
        await service.close()
