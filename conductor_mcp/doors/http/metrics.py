"""Where Prometheus scrapes a service's metrics: `/metrics` beside the other HTTP doors (behind the same Host check
and token, and for admins only: the counts cover every user's runs), or a port of its own on loopback, without a
token, for a scraper on the same machine."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, start_http_server
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conductor_mcp.doors.http.principals import current_principal
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.service.access import Front

log = get_logger(__name__)

LOOPBACK = "127.0.0.1"
ADMIN_ONLY = "/metrics needs an admin's token (CONDUCTOR_HTTP_TOKEN, or conductor-mcp tokens add NAME --admin)"


def metrics_routes(service: Front, guard: Callable[[Request], Awaitable[Response | None]]) -> list[Route]:
    """GET /metrics: the service's registry in Prometheus' text format."""

    async def scrape(request: Request) -> Response:
        refused = await guard(request)
        if refused is not None:
            return refused
        if not current_principal().admin:  # every user's runs are in the counts: pools, workers, spend
            return JSONResponse({"error": ADMIN_ONLY}, status_code=403)
        return Response(service.telemetry.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return [Route("/metrics", scrape, methods=["GET"])]


@contextlib.contextmanager
def metrics_port(service: Front, port: int | None) -> Iterator[int | None]:
    """Serve the metrics on `LOOPBACK:port` (0: a free port) for as long as the block lasts; yields the port."""
    if port is None:
        yield None
        return
    server, thread = start_http_server(port, addr=LOOPBACK, registry=service.telemetry.metrics.registry)
    bound = int(server.server_address[1])
    log.info("metrics_listening", url=f"http://{LOOPBACK}:{bound}/metrics", auth="none")
    try:
        yield bound
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
