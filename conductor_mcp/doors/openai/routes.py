"""The OpenAI-compatible door: /v1/responses, /v1/chat/completions, /v1/models and /v1/runs/{id} over HTTP.

Models are pools: `conductor` is the server's default pool, `conductor/<pool>` any pool on the search path. A
request becomes a RunRequest (openai_wire.py), the service runs it, and the run comes back as a response, a
completion, or an SSE stream of progress then answer (openai_stream.py). Every answer carries its run id
(`X-Conductor-Run-Id`). A client that goes away cancels nothing: the run goes on and stays in the store.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.records import Run
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.trace_context import trace_context
from conductor_mcp.doors.http.principals import access
from conductor_mcp.doors.openai.replies import (
    answer_items,
    chat_object,
    finished_ok,
    now_s,
    reasoning_item,
    response_object,
    run_error,
    run_of_response,
)
from conductor_mcp.doors.openai.stream import KEEPALIVE, ChatStream, ResponsesStream
from conductor_mcp.doors.openai.wire import (
    Asked,
    ToolReply,
    chat_request,
    chat_tool_reply,
    earlier_turns,
    responses_request,
    responses_tool_reply,
)
from conductor_mcp.doors.render import Links
from conductor_mcp.errors import (
    BudgetExhausted,
    ConductorError,
    ModelNotFound,
    RequestError,
    RequestTooLarge,
    RunNotFound,
)
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.service.files import workspace_in_roots
from conductor_mcp.service.patches import wants_workspace

if TYPE_CHECKING:
    from conductor_mcp.service.access import Front

log = get_logger(__name__)

NO_RETRY = {"x-should-retry": "false"}  # the openai SDK would re-send (and re-pay for) a run that failed
CHAT_PARAMS = {
    "task": "messages",
    "context": "messages",
    "input": "messages",
    "run_id": "messages",
    "budget.max_tokens": "max_tokens",
}
Guard = Callable[[Request], Awaitable[Response | None]]
Handler = Callable[[Request], Awaitable[Response]]


def error_body(message: str, kind: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def openai_error(exc: ConductorError, field_names: dict[str, str] | None = None) -> JSONResponse:
    """The one mapping of the error tree to OpenAI's error shape and status."""
    message = str(exc)
    head = message.split(":", 1)[0]
    param = (field_names or {}).get(head, head) if head.replace(".", "").replace("_", "").isalnum() else None
    status, kind, code = {
        ModelNotFound: (404, "invalid_request_error", "model_not_found"),
        RunNotFound: (404, "invalid_request_error", "not_found"),
        RequestTooLarge: (413, "invalid_request_error", "request_too_large"),
        BudgetExhausted: (429, "insufficient_quota", "insufficient_quota"),
    }.get(type(exc), (400, "invalid_request_error", "invalid_value"))
    if not isinstance(exc, RequestError | ModelNotFound | RunNotFound):
        status, kind, code, param = 500, "server_error", type(exc).__name__, None
    return JSONResponse(error_body(message, kind, code, param), status, headers=NO_RETRY)


def opening_line(run: Run) -> str:
    """The first progress line, said by the door: the run's own `conductor_started` event has usually passed
    before a waiter subscribes, so it is not relayed (it would come twice or not at all)."""
    return f"run {run.id} on pool {run.pool}: conductor {run.conductor_model} planning"


def progress_line(event: ProgressEvent) -> str:
    total = f" ({event.finished_steps}/{event.total_steps} steps done)" if event.total_steps else ""
    return f"{event.message}{total}"


class OpenAIDoor:
    """The routes' handlers over one service; `guard` is the server's Host/Origin check (None: none)."""

    def __init__(self, service: Front, guard: Guard | None = None, links: Links | None = None) -> None:
        self.service = service
        self.guard = guard
        self.links = links or Links()
        self.keepalive_s = service.settings.heartbeat_s

    def routes(self) -> list[Route]:
        return [
            Route("/v1/responses", self._guarded(self.responses, {"run_id": "previous_response_id"}), methods=["POST"]),
            Route("/v1/chat/completions", self._guarded(self.chat, CHAT_PARAMS), methods=["POST"]),
            Route("/v1/models", self._guarded(self.models), methods=["GET"]),
            Route("/v1/runs/{run_id}", self._guarded(self.run), methods=["GET"]),
        ]

    def _guarded(self, handler: Handler, params: dict[str, str] | None = None) -> Handler:
        """The handler behind the Host check, its ConductorErrors answered in OpenAI's shape; `params` renames
        the fields errors name (a RunRequest field) to the request's own."""
        names = {"task": "input", "context": "input", "budget.max_tokens": "max_output_tokens", "pool": "model"}
        names |= params or {}

        async def endpoint(request: Request) -> Response:
            if self.guard is not None and (refused := await self.guard(request)) is not None:
                message = bytes(refused.body).decode(errors="replace")
                return JSONResponse(error_body(message, "invalid_request_error", "forbidden"), refused.status_code)
            try:
                return await handler(request)
            except ConductorError as exc:
                return openai_error(exc, names)
            except RecursionError:  # a body nested deeper than the code that walks it
                return openai_error(RequestError("body: nested too deeply; send a flatter object"), names)
            except Exception:  # a bug: still an answer in OpenAI's shape, and the connection stays usable
                log.exception("openai_door_crashed", path=request.url.path)
                body = error_body("internal error; the server's log has the details", "server_error", "internal_error")
                return JSONResponse(body, 500, headers=NO_RETRY)

        return endpoint

    # -- models and runs --------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        models = self.service.pools.model_ids()
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "conductor-mcp"} for m in models]
        return JSONResponse({"object": "list", "data": data})

    async def run(self, request: Request) -> Response:
        """The stored transcript, the same JSON as the MCP resource conductor://runs/{run_id}."""
        run = access(self.service).get_run(request.path_params["run_id"])
        return Response(run.model_dump_json(indent=2), media_type="application/json")

    # -- answering --------------------------------------------------------------------------------
    async def responses(self, request: Request) -> Response:
        body = await _json_body(request)
        previous = body.get("previous_response_id")
        if previous is not None and not isinstance(previous, str):
            raise RequestError("previous_response_id: must be a response id (resp_...)")
        previous_run = run_of_response(previous) if previous is not None else None
        reply = responses_tool_reply(body, previous_run)
        if reply is not None:
            return await self._respond(self._go_on(reply), reply.model, reply.stream, ResponsesStream)
        earlier = earlier_turns(access(self.service).get_run(previous_run)) if previous_run else None
        asked = responses_request(body, earlier)
        return await self._respond(self._start(asked, request), asked.model, asked.stream, ResponsesStream)

    async def chat(self, request: Request) -> Response:
        body = await _json_body(request)
        reply = chat_tool_reply(body)
        if reply is not None:
            return await self._respond(self._go_on(reply), reply.model, reply.stream, ChatStream)
        asked = chat_request(body)
        return await self._respond(self._start(asked, request), asked.model, asked.stream, ChatStream)

    async def _respond(self, run: Run, model: str, stream: bool, wire: type[ResponsesStream | ChatStream]) -> Response:
        """The run, once it ends, as one response in the request's API, or as its SSE stream from now on."""
        created = now_s()
        if stream:
            return self._sse(run, wire(run, model, created))
        lines = [opening_line(run)]
        run = await self._finish(run, lines)
        viewer = self.links.run(run.id)
        if not finished_ok(run):
            return _failure(run, viewer)
        if wire is ChatStream:
            body = chat_object(run, model, created)
            if viewer:
                body["conductor_viewer_url"] = viewer
            return _with_run_id(JSONResponse(body), run, viewer)
        output = [reasoning_item(run, "\n".join(lines)), *answer_items(run)]
        body = response_object(run, model, output, created)
        if viewer:
            body["metadata"]["conductor_viewer_url"] = viewer
        return _with_run_id(JSONResponse(body), run, viewer)

    def _go_on(self, reply: ToolReply) -> Run:
        """The client's tool results, given to the run's final worker as a new step of the same run."""
        self.service.pools.pool_of_model(reply.model)  # an unknown model is refused as it is for a new run
        run = access(self.service).answer_tool_calls(reply.run_id, reply.results)
        log.info("openai_tool_turn", run_id=run.id, results=len(reply.results), stream=reply.stream)
        return run

    def _start(self, asked: Asked, sent: Request) -> Run:
        """A new run; the W3C `traceparent`/`tracestate` headers, when sent, make its trace a child of the caller's."""
        pool = self.service.pools.pool_of_model(asked.model)
        fields = dict(asked.run_fields)
        if wants_workspace(self.service.pools, fields.get("workspace"), pool):  # metadata.workspace, else the 1st root
            fields["workspace"] = str(workspace_in_roots(fields.get("workspace"), self.service.settings.file_roots))
        trace = trace_context(sent.headers)
        request = RunRequest.of(task=asked.task, context=asked.context, pool=pool, trace=trace, **fields)
        run = access(self.service).start(request)
        log.info("openai_run_started", run_id=run.id, model=asked.model, stream=asked.stream)
        return run

    async def _finish(self, run: Run, lines: list[str]) -> Run:
        """Follow the run to its end, keeping its progress lines; a client that goes away stops following only
        (the run goes on and stays in the store)."""

        async def collect(event: ProgressEvent) -> None:
            if event.kind not in ("heartbeat", "conductor_started"):
                lines.append(progress_line(event))

        return await access(self.service).wait(run.id, None, collect, self.keepalive_s)

    def _sse(self, run: Run, stream: ResponsesStream | ChatStream) -> Response:
        runs = access(self.service)

        async def events() -> AsyncIterator[str]:
            yield stream.start() + stream.progress(opening_line(run))
            async for event in runs.follow(run.id, self.keepalive_s):
                if event.kind != "conductor_started":
                    yield KEEPALIVE if event.kind == "heartbeat" else stream.progress(progress_line(event))
            yield stream.finish(runs.get_run(run.id))

        headers = {"cache-control": "no-cache", "x-accel-buffering": "no", "x-conductor-run-id": run.id}
        if viewer := self.links.run(run.id):
            headers["x-conductor-viewer-url"] = viewer
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


async def _json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object; its size was capped before it was read (doors/http/guards.py)."""
    raw = await request.body()
    try:
        body = json.loads(raw)
    except RecursionError:
        raise RequestError("body: JSON nested too deeply; send a flatter object") from None
    except ValueError:
        raise RequestError("body: not valid JSON; send a JSON object") from None
    if not isinstance(body, dict):
        raise RequestError("body: must be a JSON object")
    return body


def _failure(run: Run, viewer: str | None) -> Response:
    status, error = run_error(run)
    return _with_run_id(JSONResponse({"error": error}, status, headers=NO_RETRY), run, viewer)


def _with_run_id(response: Response, run: Run, viewer: str | None) -> Response:
    """The run id (and the viewer's page for it, when served) in headers, whatever the body."""
    response.headers["x-conductor-run-id"] = run.id
    if viewer:
        response.headers["x-conductor-viewer-url"] = viewer
    return response


def openai_routes(service: Front, guard: Guard | None = None, links: Links | None = None) -> list[Route]:
    """The door's routes, for doors/http/app.py to mount beside /mcp."""
    return OpenAIDoor(service, guard, links).routes()
