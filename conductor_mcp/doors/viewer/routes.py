"""The run viewer under /ui/: the run list, a page per run, its live updates, and how a browser signs in.

A door like the others: it reads runs through a RunReader (the service under `serve --http`, a lease-free reader
under `conductor-mcp view`), never writes one, and renders them. Live updates are server-sent events fed by the
reader's `follow`: the same progress events the MCP door reports for runs executing here or on a replica, and
the store's changes for a run executing in another process. The browser never polls. Sign-in: the bearer
header, or a session cookie (a new, expiring, revocable session per login: doors/viewer/sessions.py) set from a
one-time login code (single-use, expires, not the token) or from the token posted in a form body (wrong ones
are throttled); the token never travels in a URL. A login code is minted for a client that presents the token
itself, never for a session (a stolen cookie cannot renew itself), and both codes and sessions last only while
the token they came from stands. POST /ui/logout ends the session.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.limits import CODE_TTL_S, SESSION_TTL_S, VIEWER_PAGE_SIZE
from conductor_mcp.core.principal import Principal
from conductor_mcp.core.records import RUN_STATUSES
from conductor_mcp.doors.http.auth import AuthThrottle
from conductor_mcp.doors.http.principals import LOCAL_IDENTITY, Credentials, Identity, presented_token, reads
from conductor_mcp.doors.viewer import html as html
from conductor_mcp.doors.viewer.list_page import list_page
from conductor_mcp.doors.viewer.sessions import Sessions
from conductor_mcp.errors import ConductorError, RequestError, RunNotFound, StepNotFound, StoreError
from conductor_mcp.service.access import Reads
from conductor_mcp.service.tokens import TokenBook

if TYPE_CHECKING:
    from conductor_mcp.service.access import ReadFront

Guard = Callable[[Request], Awaitable[Response | None]]
Handler = Callable[[Request], Awaitable[Response]]

STATIC_DIR = Path(__file__).with_name("static")
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


class ViewerAuth:
    """How a browser signs in to the viewer: one-time login codes, then a session cookie (doors/viewer/sessions.py)
    that names the principal who signed in; the tokens the server accepts (`credentials`: the admin token and
    the named ones in `tokens`); and the record of failed token sign-ins that every door shares
    (doors/http/auth.py)."""

    def __init__(
        self, token: str | None, session_ttl_s: float = SESSION_TTL_S, tokens: TokenBook | None = None
    ) -> None:
        self.token = token
        self.credentials = Credentials(token, tokens)
        self.sessions = Sessions(token, session_ttl_s) if token else None  # not the token: no /mcp, no /v1
        self.throttle = AuthThrottle()
        self._codes: dict[str, tuple[float, Identity]] = {}

    def mint(self, identity: Identity = LOCAL_IDENTITY) -> str:
        """A fresh single-use login code for the holder of the token `identity` names, valid for CODE_TTL_S
        seconds (and only while that token stands)."""
        now = time.monotonic()
        self._codes = {code: minted for code, minted in self._codes.items() if minted[0] > now}
        code = secrets.token_urlsafe(24)
        self._codes[code] = (now + CODE_TTL_S, identity)
        return code

    def redeem(self, code: str) -> Identity | None:
        """Who a code was minted for, if it is unused, unexpired and its token stands (it is used up either way)."""
        until, identity = self._codes.pop(code, (0.0, None))
        if identity is None or until <= time.monotonic() or self.credentials.standing(identity) is None:
            return None
        return identity

    def session_principal(self, cookie_header: str) -> Principal | None:
        """The principal of the browser's session, while the session and the very token it signed in with stand."""
        session = self.sessions.find(cookie_header) if self.sessions is not None else None
        return self.credentials.standing(session.identity) if session is not None else None

    def signed_in(self, target: str, https: bool, identity: Identity) -> Response:
        """Redirect to `target` (a viewer path only) with a new session's cookie set for `identity`."""
        response = RedirectResponse(target if _viewer_path(target) else "/ui/", status_code=303)
        if self.sessions is not None:
            self.sessions.set_cookie(response, self.sessions.issue(identity), https)
        return secured(response)

    def signed_out(self, cookie_header: str) -> Response:
        """End the browser's session (revoked here, its cookie cleared) and show the sign-in page."""
        if self.sessions is not None:
            session = self.sessions.find(cookie_header)
            if session is not None:
                self.sessions.revoke(session)
        response = login_page("/ui/", status=200)
        Sessions.clear_cookies(response)
        return response


def _viewer_path(target: str) -> bool:
    return target.startswith("/ui/") and not target.startswith("//") and "\\" not in target


def is_open_path(path: str) -> bool:
    """Viewer paths that need no sign-in: the login itself and the package's static files."""
    return path in ("/ui/login", "/ui") or path.startswith("/ui/static/")


def secured(response: Response, cache: bool = False) -> Response:
    response.headers.update(SECURITY_HEADERS)
    response.headers["cache-control"] = "max-age=300" if cache else "no-store"
    return response


def login_page(next_path: str, status: int = 401) -> Response:
    """What an unauthenticated browser sees: how to sign in (the token goes in a form body, never a URL)."""
    target = next_path if _viewer_path(next_path) else "/ui/"
    form = (
        f'<form method="post" action="/ui/login"><input type="hidden" name="next" value="{html._e(target)}">'
        '<label>token <input type="password" name="token" autocomplete="off"></label> '
        '<button type="submit">sign in</button></form>'
    )
    text = (
        "Sign in with your token (one made by `conductor-mcp tokens add`, or the server's own: CONDUCTOR_HTTP_TOKEN "
        "or the http-token file in the state directory), or open a one-time login URL (printed by "
        "`conductor-mcp serve --http` and `view`)."
    )
    return secured(HTMLResponse(html.message_page("Sign in to the run viewer", text, form), status_code=status))


def _sse(kind: str, doc: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps(doc)}\n\n"


def event_doc(event: ProgressEvent) -> dict[str, Any]:
    step = event.step
    return {
        "kind": event.kind,
        "message": event.message,
        "finished": event.finished_steps,
        "total": event.total_steps,
        "step": step.key if step else None,
        "status": step.status if step else None,
    }


class Viewer:
    """The viewer's routes over a run reader (read only)."""

    def __init__(self, service: ReadFront, auth: ViewerAuth, guard: Guard | None = None) -> None:
        self.service = service
        self.auth = auth
        self.guard = guard

    def routes(self) -> list[Route]:
        return [
            Route("/ui", self._guarded(self.home)),
            Route("/ui/", self._guarded(self.runs)),
            Route("/ui/runs/{run_id}", self._guarded(self.run)),
            Route("/ui/runs/{run_id}/events", self._guarded(self.events)),
            Route("/ui/runs/{run_id}/steps/{key}/messages", self._guarded(self.messages)),
            Route("/ui/login", self._guarded(self.login), methods=["GET", "POST"]),
            Route("/ui/login-codes", self._guarded(self.login_code), methods=["POST"]),
            Route("/ui/logout", self._guarded(self.logout), methods=["POST"]),
            Route("/ui/static/{name}", self._guarded(self.static)),
        ]

    def _guarded(self, handler: Handler) -> Handler:
        """The Host/Origin check (DNS rebinding) first; bad input, unknown runs and a failing store as pages."""

        async def endpoint(request: Request) -> Response:
            if self.guard is not None and (refused := await self.guard(request)) is not None:
                return secured(refused)
            try:
                return await handler(request)
            except ConductorError as exc:
                return viewer_error(exc)

        return endpoint

    async def home(self, request: Request) -> Response:
        return secured(RedirectResponse("/ui/", status_code=308))

    async def runs(self, request: Request) -> Response:
        """The run list: newest first, filtered by status and pool, VIEWER_PAGE_SIZE rows a page (keyset paging)."""
        query = request.query_params
        filters = {k: query[k] for k in ("status", "pool", "before", "after") if query.get(k)}
        if filters.get("status") and filters["status"] not in RUN_STATUSES:
            raise RequestError(f"status: must be one of {', '.join(RUN_STATUSES)}, got {filters['status']!r}")
        listed = list_page(reads(self.service), filters, VIEWER_PAGE_SIZE)
        return secured(HTMLResponse(html.list_page(listed, filters, self.service.pools.names())))

    async def run(self, request: Request) -> Response:
        """A run's page, or (?part=body) just the part the live script swaps in."""
        mine = reads(self.service)
        run = mine.get_run(request.path_params["run_id"])
        children = mine.list_runs(VIEWER_PAGE_SIZE, parent_id=run.id)
        if request.query_params.get("part") == "body":
            return secured(HTMLResponse(html.run_body(run, children)))
        return secured(HTMLResponse(html.run_page(run, children)))

    async def messages(self, request: Request) -> Response:
        """The exact messages a step's model received, as kept in the store."""
        run_id, key = request.path_params["run_id"], request.path_params["key"]
        messages = reads(self.service).step_messages(run_id, key)
        if request.query_params.get("part"):
            return secured(HTMLResponse(html.messages_fragment(messages)))
        return secured(HTMLResponse(html.messages_page(run_id, key, messages)))

    async def events(self, request: Request) -> Response:
        """Server-sent events while the run executes: 'progress' on each change, 'end' when it stops."""
        run_id, mine = request.path_params["run_id"], reads(self.service)
        mine.get_run(run_id)
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        response = StreamingResponse(self._events(mine, run_id), media_type="text/event-stream", headers=headers)
        return secured(response)

    async def _events(self, mine: Reads, run_id: str) -> AsyncIterator[str]:
        yield _sse("progress", {"kind": "subscribed"})  # the page refreshes once: nothing before this is missed
        async for event in mine.follow(run_id, self.service.settings.heartbeat_s):  # ends with the run
            yield _sse("progress", event_doc(event))
        yield _sse("end", {"status": mine.get_run(run_id).status})

    async def login(self, request: Request) -> Response:
        """GET with a one-time code, or POST the token in a form body: either starts a session (a new cookie)."""
        https, target = request.url.scheme == "https", request.query_params.get("next", "/ui/")
        if self.auth.token is None:
            return self.auth.signed_in(target, https, LOCAL_IDENTITY)
        if request.method == "GET":
            if (identity := self.auth.redeem(request.query_params.get("code", ""))) is not None:
                return self.auth.signed_in(target, https, identity)
            return login_page("/ui/", status=403)
        client = request.client.host if request.client else ""
        if (wait := self.auth.throttle.retry_after(client)) is not None:
            page = html.message_page("Too many sign-in attempts", f"Wrong tokens were sent; try again in {wait} s.")
            return secured(HTMLResponse(page, status_code=429, headers={"retry-after": str(wait)}))
        form = await request.form()
        target = str(form.get("next") or "/ui/")
        if (identity := self.auth.credentials.identify(str(form.get("token") or ""))) is not None:
            return self.auth.signed_in(target, https, identity)
        self.auth.throttle.failed(client)
        return login_page(target, status=403)

    async def logout(self, request: Request) -> Response:
        return self.auth.signed_out(request.headers.get("cookie", ""))

    async def login_code(self, request: Request) -> Response:
        """A one-time login URL for a browser, minted for a client that presents the token in its Authorization
        header: a session's cookie mints none, so a stolen cookie cannot outlive its sign-out or expiry."""
        identity = LOCAL_IDENTITY if self.auth.token is None else None
        if (token := presented_token()) is not None:
            identity = self.auth.credentials.identify(token)
        if identity is None:
            message = "a login code needs the token in Authorization: Bearer <token>; a viewer session cannot mint one"
            return secured(JSONResponse({"error": message}, status_code=401))
        code = self.auth.mint(identity)
        return secured(JSONResponse({"url": f"/ui/login?code={code}", "expires_in_s": CODE_TTL_S}))

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        path = STATIC_DIR / name
        if Path(name).name != name or path.suffix not in STATIC_TYPES or not path.is_file():
            return secured(Response("not found", status_code=404, media_type="text/plain"))
        return secured(Response(path.read_bytes(), media_type=STATIC_TYPES[path.suffix]), cache=True)


def viewer_error(exc: ConductorError) -> Response:
    """The one mapping of the error tree to a viewer page: unknown runs and steps 404, a store that cannot be
    read 503, anything else the caller's bad request."""
    if isinstance(exc, RunNotFound | StepNotFound):
        return secured(HTMLResponse(html.message_page("Not found", str(exc)), status_code=404))
    if isinstance(exc, StoreError):
        return secured(HTMLResponse(html.message_page("Run store unavailable", str(exc)), status_code=503))
    return secured(HTMLResponse(html.message_page("Bad request", str(exc)), status_code=400))


def viewer_routes(service: ReadFront, auth: ViewerAuth, guard: Guard | None = None) -> list[Route]:
    return Viewer(service, auth, guard).routes()
