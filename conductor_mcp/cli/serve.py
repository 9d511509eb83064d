"""`conductor-mcp serve` (MCP over stdio or HTTP, with the OpenAI door and the viewer) and `conductor-mcp view`
(the viewer alone, read only): each opens what it serves and closes it when stopped."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys

from conductor_mcp.cli.output import say as _say
from conductor_mcp.config import Settings
from conductor_mcp.errors import RequestError
from conductor_mcp.runtime.loop import settle_collector


async def serve(args: argparse.Namespace, settings: Settings) -> int:
    from conductor_mcp.doors.http.metrics import metrics_port
    from conductor_mcp.service.access import Front
    from conductor_mcp.service.service import Service

    scrape_port = _metrics_port(args, settings)
    if args.http:
        from conductor_mcp.doors.http.app import base_url, serve_http
        from conductor_mcp.doors.viewer.routes import ViewerAuth
        from conductor_mcp.service.tokens import TokenBook

        token = _http_token(args, settings)
        tokens = TokenBook(settings.tokens_file)
        named = len(tokens.entries())  # a broken tokens file stops the server here, saying which file
        viewer = ViewerAuth(token, tokens=tokens)
        if token and named:
            _say(f"conductor-mcp: {named} named token(s) accepted too (conductor-mcp tokens list)", file=sys.stderr)
        login = f"/ui/login?code={viewer.mint()}" if token else "/ui/"
        _say(f"conductor-mcp: run viewer: {base_url(args.host, args.port)}{login} (a one-time link)", file=sys.stderr)
        async with Service.open(settings) as service:
            # Loaded before it listens: no host waits on this start, and no request must wait behind the imports.
            await service.providers.warm(service.pools.models, then=settle_collector)
            front = Front(service)  # the doors' view: every run operation checked for the caller
            with metrics_port(front, scrape_port):
                await serve_http(front, args.host, args.port, token, args.allowed_host, viewer)
    else:
        from conductor_mcp.doors.mcp.server import serve_stdio

        async with Service.open(settings) as service:
            service.after_warm_up = settle_collector  # what litellm allocated too, after the host's handshake
            front = Front(service)
            with metrics_port(front, scrape_port):
                await serve_stdio(front)
    return 0


def _metrics_port(args: argparse.Namespace, settings: Settings) -> int | None:
    """--metrics-port, else CONDUCTOR_METRICS_PORT; checked before anything is served."""
    port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
    if port is not None and not 0 <= port <= 65535:
        raise RequestError(f"--metrics-port: {port} is not a port number (0-65535)")
    return port


async def view(args: argparse.Namespace, settings: Settings) -> int:
    """The viewer alone, on loopback, for hosts that run the server over stdio: a token made for this process
    only, and a one-time login URL printed (and opened where a browser is available)."""
    import secrets
    import webbrowser
    from urllib.parse import quote

    from conductor_mcp.doors.http.app import base_url, serve_viewer
    from conductor_mcp.doors.viewer.routes import ViewerAuth
    from conductor_mcp.service.access import ReadFront
    from conductor_mcp.service.reader import RunReader

    token = secrets.token_urlsafe(32)
    viewer = ViewerAuth(token)
    target = f"/ui/runs/{quote(args.run_id, safe='')}" if args.run_id else "/ui/"

    def announce(port: int) -> None:
        url = f"{base_url('127.0.0.1', port)}/ui/login?code={viewer.mint()}&next={quote(target, safe='')}"
        _say(f"conductor-mcp: run viewer (read only) at {url}\n  a one-time link; Ctrl-C stops the viewer", flush=True)
        if not args.no_browser:
            with contextlib.suppress(webbrowser.Error):
                webbrowser.open(url)

    with RunReader.open(settings) as reader:
        if args.run_id:
            reader.get_run(args.run_id)  # an unknown run fails here, before anything is served
        await serve_viewer(ReadFront(reader), "127.0.0.1", args.port or 0, token, viewer, announce)
    return 0


def _http_token(args: argparse.Namespace, settings: Settings) -> str | None:
    """The token HTTP clients must send: CONDUCTOR_HTTP_TOKEN, else one kept in the state directory; None with
    --no-auth. Says on stderr where the token is and how to configure a client; never prints the token."""
    from conductor_mcp.doors.http.app import base_url, is_loopback, stored_token

    if args.no_auth:
        if settings.http_token:
            raise RequestError("--no-auth: CONDUCTOR_HTTP_TOKEN is set too; unset it, or drop --no-auth")
        if not is_loopback(args.host):
            raise RequestError(f"--no-auth: only a loopback --host may serve without a token, not {args.host!r}")
        _say(
            "conductor-mcp: WARNING: serving HTTP without a token (--no-auth): any account on this machine can "
            "read every run (tasks, contexts, answers) and start runs that spend the pools' API keys",
            file=sys.stderr,
        )
        return None
    if settings.http_token:
        _say("conductor-mcp: HTTP clients must send CONDUCTOR_HTTP_TOKEN as 'Authorization: Bearer'", file=sys.stderr)
        return settings.http_token
    token, made = stored_token(settings.http_token_file)
    url = f"{base_url(args.host, args.port)}/mcp"
    path = shlex.quote(str(settings.http_token_file))
    headers = json.dumps({"Authorization": f"Bearer <the text of {settings.http_token_file}>"})
    _say(
        f"conductor-mcp: HTTP clients must send the bearer token {'just made in' if made else 'kept in'} {path} "
        f"(readable by you only; delete it for a new one, or set CONDUCTOR_HTTP_TOKEN)\n"
        f"  Claude Code: claude mcp add --transport http conductor {url} "
        f'--header "Authorization: Bearer $(cat {path})"\n'
        f'  JSON config: {{"type": "http", "url": "{url}", "headers": {headers}}}',
        file=sys.stderr,
    )
    return token
