"""The run view as an MCP App (SEP-1865, the `io.modelcontextprotocol/ui` extension): the run drawn inside the host.

`orchestrate`, `continue_workflow` and the run resource point at `ui://conductor/run-view.html` (`_meta.ui`), an
HTML document the host renders in a sandboxed iframe (doors/mcp/app/run_view.html). The app reads everything
through the host over its postMessage bridge, never from our HTTP port, so it works over stdio too and carries
the host's auth: `run_view` (app-only) returns the run as data, waiting for its next change while it runs (a live
timeline with no polling loop here); a step's exact messages and diff are `resources/read`s; cancel is
`cancel_run` (app-only), continue and apply are `continue_workflow` calls the host shows and may confirm.

The pictures come from the viewer's layouts (doors/viewer/svg.py) as numbers and short labels; the app draws
them with DOM calls and puts every text in with `textContent`, and its own Content-Security-Policy (hashes of
its one script and one stylesheet, nothing else) lets no other script run and no request leave the frame.

SEP-2133's graceful degradation: a client that did not negotiate the extension (`mimeTypes` with the app's MIME
type) sees today's server byte for byte: `ui_gate` takes the `_meta.ui` entries, the app-only tools and the
`ui://` resource out of what it lists and reads, and the app-only tools refuse it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any

from mcp.server.apps import APP_MIME_TYPE, Apps, ResourceCsp, client_supports_apps
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.limits import APP_TEXT_CHARS, APP_WAIT_S
from conductor_mcp.core.records import Run, RunStatus, StepRecord
from conductor_mcp.core.usage import Totals
from conductor_mcp.doors.http.principals import access
from conductor_mcp.doors.viewer.svg import graph_layout, source_key, timeline_layout
from conductor_mcp.errors import RequestError
from conductor_mcp.service.access import Front, Reads
from conductor_mcp.service.patches import PatchSummary, patch_summary, patch_uri

APP_URI = "ui://conductor/run-view.html"
UI_META: dict[str, Any] = {"ui": {"resourceUri": APP_URI}}
APP_ONLY_TOOLS = frozenset({"run_view", "cancel_run"})
HTML_PATH = Path(__file__).with_name("app") / "run_view.html"
CSP_PLACEHOLDER = "CONTENT_SECURITY_POLICY"

RunIdArg = Annotated[str, Field(min_length=1, max_length=64, description="A run id.")]


def app_document() -> str:
    """The app's one HTML document, its CSP naming the hashes of its own inline script and stylesheet."""
    html = HTML_PATH.read_text(encoding="utf-8")
    hashes = {kind: _sha256(_inline(html, kind)) for kind in ("script", "style")}
    csp = (
        f"default-src 'none'; script-src '{hashes['script']}'; style-src '{hashes['style']}'; img-src 'none'; "
        "connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return html.replace(CSP_PLACEHOLDER, csp)


def _inline(html: str, tag: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL)
    if len(found) != 1:
        raise ValueError(f"{HTML_PATH} must hold exactly one inline <{tag}>, found {len(found)}")
    return found[0]


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def _cut(text: str | None, limit: int = APP_TEXT_CHARS) -> str:
    text = text or ""
    return text if len(text) <= limit else f"{text[:limit]}\n[... {len(text) - limit} more characters]"


class StepView(BaseModel):
    """One step as the app shows it; its exact messages are at `uri`, its diff at `diff_uri`."""

    key: str
    parent: str | None
    worker: str
    model: str
    answered_by: str | None
    status: str
    instruction: str
    sees: list[str] = Field(description="the keys of the steps whose work it saw (empty: the task only)")
    tokens: int
    cost_usd: float
    latency_s: float
    attempts: int
    error: str | None
    output: str
    uri: str
    agent: str | None = Field(description="the agent CLI and its version, for an agent step")
    changed: str | None = Field(description="what the step changed in its workspace, in one line")
    diff_uri: str | None


class RunView(BaseModel):
    """A run as the app draws it: facts, the graph and timeline layouts, the steps, the patch."""

    run_id: str
    version: str = Field(description="changes whenever the run does: pass it back as `seen` to wait for a change")
    status: RunStatus
    task: str
    answer: str
    error: str | None
    stopped: str | None
    pool: str
    parent_run_id: str | None
    reasoning: str
    totals: Totals
    graph: dict[str, Any] | None
    timeline: dict[str, Any] | None
    steps: list[StepView]
    patch: PatchSummary | None


def step_view(run: Run, step: StepRecord) -> StepView:
    work, changed = step.work, None
    if work is not None and work.diff is not None:
        changed = f"{len(work.diff.files)} files, +{work.diff.added} -{work.diff.removed} lines"
    agent = work.agent if work is not None else None
    return StepView(
        key=step.key,
        parent=step.parent,
        worker=step.label(),
        model=step.model,
        answered_by=step.answered_by,
        status=step.status,
        instruction=_cut(step.instruction),
        sees=[source_key(step.parent, i) for i in step.access],
        tokens=step.prompt_tokens + step.completion_tokens,
        cost_usd=step.cost_usd,
        latency_s=step.latency_s,
        attempts=len(step.attempts),
        error=step.error,
        output=_cut(step.output),
        uri=f"conductor://runs/{run.id}/steps/{step.key}",
        agent=f"{agent.cli} {agent.version or ''}".strip() if agent is not None else None,
        changed=changed,
        diff_uri=patch_uri(run.id, step.key, "diff") if work is not None else None,
    )


def version_of(run: Run) -> str:
    """A digest of the stored run: equal versions, nothing new to draw."""
    return hashlib.sha256(run.model_dump_json().encode("utf-8")).hexdigest()[:16]


def run_view(run: Run) -> CallToolResult:
    graph, timeline = graph_layout(run), timeline_layout(run)
    stopped = f"{run.stop.kind.replace('_', ' ')}: {run.stop.detail}" if run.stop and run.stop.is_limit else None
    view = RunView(
        run_id=run.id,
        version=version_of(run),
        status=run.status,
        task=_cut(run.task),
        answer=_cut(run.answer),
        error=run.error,
        stopped=stopped,
        pool=run.pool,
        parent_run_id=run.parent_id,
        reasoning=_cut(run.workflow.reasoning if run.workflow else ""),
        totals=run.totals,
        graph=dataclasses.asdict(graph) if graph else None,
        timeline=dataclasses.asdict(timeline) if timeline else None,
        steps=[step_view(run, step) for step in run.steps],
        patch=patch_summary(run),
    )
    done = sum(1 for s in run.steps if s.status == "done")
    text = f"run {run.id}: {run.status}, {done}/{len(run.steps)} steps done"
    structured = view.model_dump(mode="json")
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


async def next_change(reads: Reads, run_id: str, seen: str | None, wait_s: float) -> Run:
    """The run once it differs from version `seen`, or as it is after `wait_s` (at once when it is not running).

    The follower is registered before the run is read, so a change between the read and the wait is not missed
    for a run executing here (a run elsewhere is followed through the store or NOTIFY: a change in that gap costs
    at most one wait)."""
    events = reads.follow(run_id)

    async def first() -> ProgressEvent | None:
        return await anext(events, None)

    waiter = asyncio.ensure_future(first())
    try:
        await asyncio.sleep(0)  # the waiter's first step runs now: it subscribes, then waits for an event
        run = reads.get_run(run_id)
        if run.status != "running" or version_of(run) != seen:
            return run
        await asyncio.wait({waiter}, timeout=wait_s)
    finally:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        await events.aclose()
    return reads.get_run(run_id)


def apps_extension(service: Front, tool_errors: Callable[[], AbstractContextManager[None]]) -> Apps:
    """The app's resource and its app-only tools (hosts keep `visibility: ["app"]` tools from their model);
    `tool_errors` maps the error tree for a tool's caller (doors/mcp/server.py's)."""
    apps = Apps()
    apps.add_html_resource(
        APP_URI,
        app_document(),
        name="run-view",
        title="conductor-mcp run",
        description="A run drawn inside the host: its workflow graph, live timeline, steps, diffs and answer.",
        csp=ResourceCsp(connect_domains=[], resource_domains=[], frame_domains=[], base_uri_domains=[]),
        prefers_border=True,
    )

    @apps.tool(
        resource_uri=APP_URI,
        visibility=["app"],
        name="run_view",
        title="A run, as the run view draws it",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        description="The run as data for the run view; with `seen` (a version it returned), waits up to "
        "wait_seconds for the run to change while it runs.",
    )
    async def run_view_tool(
        run_id: RunIdArg,
        ctx: Context,
        seen: Annotated[str | None, Field(max_length=64, description="the version last drawn")] = None,
        wait_seconds: Annotated[float, Field(ge=0, le=APP_WAIT_S, description="longest wait for a change")] = 0,
    ) -> Annotated[CallToolResult, RunView]:
        with tool_errors():
            for_apps(ctx, "run_view")
            return run_view(await next_change(access(service), run_id, seen, wait_seconds))

    @apps.tool(
        resource_uri=APP_URI,
        visibility=["app"],
        title="Cancel a run",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
        description="Cancel a running run, keeping its finished steps (continue_workflow resumes it).",
    )
    async def cancel_run(run_id: RunIdArg, ctx: Context) -> Annotated[CallToolResult, RunView]:
        with tool_errors():
            for_apps(ctx, "cancel_run")
            return run_view(await access(service).cancel(run_id))

    return apps


def for_apps(ctx: Context, tool: str) -> None:
    """App-only tools answer only clients that render the app (others never see them listed)."""
    if not client_supports_apps(ctx):
        raise RequestError(
            f"{tool} serves the run view of MCP Apps hosts; this client did not negotiate {APP_MIME_TYPE}"
        )


async def ui_gate(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: a client that did not negotiate MCP Apps gets what it got before the app existed."""
    result = await call_next(ctx)
    if client_supports_apps(ctx) or not isinstance(result, dict):
        return result
    return without_ui(ctx.method, result)


def without_ui(method: str, result: dict[str, Any]) -> dict[str, Any]:
    """A list or read result with the app's entries taken out (the wire dict, as the SDK serialised it)."""
    if method == "tools/list":
        tools = [t for t in result.get("tools", []) if t.get("name") not in APP_ONLY_TOOLS]
        return {**result, "tools": [_no_ui_meta(t) for t in tools]}
    if method == "resources/list":
        return {**result, "resources": [r for r in result.get("resources", []) if not r["uri"].startswith("ui://")]}
    if method == "resources/templates/list":
        return {**result, "resourceTemplates": [_no_ui_meta(t) for t in result.get("resourceTemplates", [])]}
    if method == "resources/read":
        return {**result, "contents": [_no_ui_meta(c) for c in result.get("contents", [])]}
    return result


def _no_ui_meta(entry: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (entry.get("_meta") or {}).items() if k != "ui"}
    stripped = {k: v for k, v in entry.items() if k != "_meta"}
    return {**stripped, "_meta": meta} if meta else stripped
