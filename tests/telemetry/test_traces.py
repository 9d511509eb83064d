"""Traces of runs sent by the real OTLP exporter (HTTP/protobuf) to a receiver on loopback that decodes them."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta
from opentelemetry import context as otel_context
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from conductor_mcp.config import Settings
from conductor_mcp.core.trace_context import TraceContext
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.doors.viewer.html import run_page
from conductor_mcp.runs.postgres import PostgresStore
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.service.service import Service
from tests.agents.conftest import agent_root, needs_bwrap, repo  # noqa: F401 (fixtures used below)
from tests.agents.test_engine import agent_pool
from tests.conftest import HttpServer, ask, scripted_pool, sim_pool_doc, worker

pytestmark = [pytest.mark.slow]

TASK = "What is the capital of the secret-task-text country?"


@dataclass
class Received:
    spans: list[Any] = field(default_factory=list)  # opentelemetry.proto.trace.v1.Span
    resources: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP trace receiver on a loopback port; yields its base URL and what it has decoded."""
    received = Received()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            request = ExportTraceServiceRequest.FromString(body)
            received.paths.append(self.path)
            for resource_spans in request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                received.resources.append(attributes)
                for scope_spans in resource_spans.scope_spans:
                    received.spans.extend(scope_spans.spans)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def value(attribute: Any) -> Any:
    kind = attribute.value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in attribute.value.array_value.values]
    return getattr(attribute.value, kind)


def value_of(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def attributes(span: Any) -> dict[str, Any]:
    return {a.key: value(a) for a in span.attributes}


def tree(spans: list[Any]) -> dict[str, Any]:
    """The spans as {name: {children}} from the root, children in start order."""
    by_parent: dict[bytes, list[Any]] = {}
    for span in spans:
        by_parent.setdefault(span.parent_span_id, []).append(span)

    def below(span_id: bytes) -> dict[str, Any]:
        children = sorted(by_parent.get(span_id, []), key=lambda s: s.start_time_unix_nano)
        return {child.name: below(child.span_id) for child in children}

    return below(b"")


def pool_with_faults(pool_dir: Path, base: str) -> str:
    workers = [
        worker(base, "flaky500-1", max_retries=1),
        worker(base, "down", max_retries=0, fallbacks=["ok"]),
        worker(base, "ok"),
    ]
    steps = [("flaky500-1", "Solve it.", []), ("down", "Check it.", [0])]
    return scripted_pool(pool_dir, "traced", steps, workers=workers, anonymize=False)


async def traced_run(tmp_path: Path, pool_dir: Path, endpoint: str, pool: str, **settings: Any) -> Any:
    config = Settings.from_env(state_dir=tmp_path / "state", otlp_endpoint=endpoint, retry_base_s=0.01, **settings)
    async with Service.open(config.with_pool_dirs_first(pool_dir)) as service:
        run = await service.orchestrate(ask(TASK, pool=pool))
    return run  # the service has closed: its tracer provider was shut down, flushing every span


async def test_a_run_is_one_trace_of_plan_steps_and_model_calls(
    tmp_path: Path, pool_dir: Path, faulty_base: str, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    pool = pool_with_faults(pool_dir, faulty_base)
    run = await traced_run(tmp_path, pool_dir, endpoint, pool)
    assert run.status == "done", run.error
    assert received.paths and set(received.paths) == {"/v1/traces"}
    assert received.resources[0]["service.name"] == "conductor-mcp"
    assert {span.trace_id.hex() for span in received.spans} == {run.trace_id}
    assert tree(received.spans) == {
        f"run {pool}": {
            "plan openai/scripted-conductor": {"chat openai/scripted-conductor": {}},
            "step 0 flaky500-1": {"chat hosted_vllm/flaky500-1": {}},  # two attempts, one name: see below
            "step 1 down": {"chat hosted_vllm/down": {}, "chat hosted_vllm/ok": {}},
        }
    }
    spans = {(span.name, attributes(span).get("conductor.attempt")): span for span in received.spans}
    root = attributes(spans[(f"run {pool}", None)])
    assert root["conductor.run.id"] == run.id and root["conductor.run.status"] == "done"
    retried = attributes(spans[("chat hosted_vllm/flaky500-1", 1)])
    answered = spans[("chat hosted_vllm/flaky500-1", 2)]
    assert retried["error.type"] == "InternalServerError" and "gen_ai.usage.input_tokens" not in retried
    step0 = run.steps[0]
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "hosted_vllm/flaky500-1",
        "gen_ai.response.model": "hosted_vllm/flaky500-1",
        "gen_ai.usage.input_tokens": step0.prompt_tokens,
        "gen_ai.usage.output_tokens": step0.completion_tokens,
        "gen_ai.response.finish_reasons": [step0.finish_reason],
        "conductor.fallback": False,
    }
    assert expected.items() <= attributes(answered).items() and step0.prompt_tokens > 0
    fallback = attributes(spans[("chat hosted_vllm/ok", 2)])
    assert fallback["conductor.fallback"] is True and fallback["gen_ai.response.model"] == "hosted_vllm/ok"
    step_span = spans[("step 1 down", None)]
    calls = [s for s in received.spans if s.parent_span_id == step_span.span_id]
    assert len(calls) == 2
    for call in calls:
        assert step_span.start_time_unix_nano <= call.start_time_unix_nano <= call.end_time_unix_nano
        assert call.end_time_unix_nano <= step_span.end_time_unix_nano
    every_value = [str(v) for span in received.spans for v in attributes(span).values()]
    assert not any("secret-task-text" in v or "Solve it" in v for v in every_value)  # no prompt text by default
    stored = SqliteStore(tmp_path / "state" / "runs.sqlite3")
    try:
        assert stored.load_run(run.id).trace_id == run.trace_id
    finally:
        stored.close()


async def test_prompts_and_answers_go_into_spans_only_when_the_operator_opts_in(
    tmp_path: Path, pool_dir: Path, faulty_base: str, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    workers = [worker(faulty_base, "ok")]
    pool = scripted_pool(pool_dir, "content", [("ok", "Solve it.", [])], workers=workers, anonymize=False)
    run = await traced_run(tmp_path, pool_dir, endpoint, pool, trace_content=True)
    (call,) = [s for s in received.spans if s.name == "chat hosted_vllm/ok"]
    shown = attributes(call)
    assert TASK in shown["gen_ai.input.messages"] and "Solve it." in shown["gen_ai.input.messages"]
    (answer,) = json.loads(shown["gen_ai.output.messages"])
    assert answer["parts"] == [{"type": "text", "content": run.answer}] and answer["finish_reason"] == "stop"


async def test_a_resumed_run_continues_its_trace_kept_in_postgresql(
    tmp_path: Path, pool_dir: Path, postgres_url: str, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    doc = sim_pool_doc()
    doc["workers"][0] |= {"model": "openai/late", "params": {"mock_response": "late answer", "mock_delay": 60}}
    scripted_pool(pool_dir, "resumed", [("model_0", "Solve it.", [])], workers=doc["workers"])
    config = Settings.from_env(state_dir=tmp_path / "state", otlp_endpoint=endpoint, database_url=postgres_url)
    config = config.with_pool_dirs_first(pool_dir)
    async with Service.open(config) as first:
        run = first.start(ask(TASK, pool="resumed"))
        async for event in first.follow(run.id):
            if event.kind == "step_started":
                break
    interrupted = PostgresStore(postgres_url)
    try:
        kept = interrupted.load_run(run.id)
    finally:
        interrupted.close()
    assert kept.status == "interrupted" and kept.trace_id and len(received.spans) >= 3
    doc["workers"][0]["params"]["mock_delay"] = 0  # the worker answers at once now
    scripted_pool(pool_dir, "resumed", [("model_0", "Solve it.", [])], workers=doc["workers"])
    async with Service.open(config) as second:
        resumed = second.continue_run(run.id)
        done = await second.wait(resumed.id, None)
        live = second.telemetry.metrics.registry.get_sample_value("conductor_replicas_live", {"backend": "postgresql"})
        assert live == 1  # this replica's advisory lock; the first one's went with its session
    assert done.status == "done" and done.trace_id == kept.trace_id
    roots = [s for s in received.spans if not s.parent_span_id]
    assert len(roots) == 2 and {s.trace_id.hex() for s in received.spans} == {kept.trace_id}
    assert [attributes(r).get("conductor.run.resumed", False) for r in roots] == [False, True]
    assert [attributes(r)["conductor.run.status"] for r in roots] == ["interrupted", "done"]
    assert kept.trace_id in run_page(done, [])  # the viewer shows it


@needs_bwrap
async def test_a_failing_agents_stderr_that_quotes_the_task_stays_out_of_every_span(
    tmp_path: Path,
    pool_dir: Path,
    agent_root: Path,  # noqa: F811 (the agent tests' fixture)
    repo: Path,  # noqa: F811 (the agent tests' fixture)
    receiver: tuple[str, Received],
) -> None:
    endpoint, received = receiver
    agent_pool(pool_dir)
    settings = Settings.from_env(
        state_dir=tmp_path / "state", workspace_dir=agent_root, roots=(repo,), otlp_endpoint=endpoint
    ).with_pool_dirs_first(pool_dir)
    failing = Workflow(steps=[Step(worker="writer", instruction="sim-agent fail 3", access=[])])
    async with Service.open(settings) as service:
        run = await service.wait(service.start(ask(TASK, pool="agents"), failing).id, None)
    (step,) = run.steps
    assert run.status == "failed" and run.stop is not None
    assert "secret-task-text" in (step.error or "") and "secret-task-text" in (run.error or "")  # what leaked
    spans = {span.name: span for span in received.spans}
    shown = [span.status.message for span in received.spans]
    shown += [str(v) for span in received.spans for v in attributes(span).values()]
    assert not any("secret-task-text" in text or "sim-agent" in text for text in shown), shown
    assert spans["step 0 writer"].status.message == "failed"
    assert spans["run agents"].status.message == run.stop.kind
    calls = [span for span in received.spans if span.name.startswith("chat ")]
    assert len(calls) == 2 and {attributes(c)["error.type"] for c in calls} == {c.status.message for c in calls}


def traced_server(tmp_path: Path, endpoint: str, **env: str) -> HttpServer:
    """A `conductor-mcp serve --http` on the sim pool whose spans go to the receiver at `endpoint`."""
    return HttpServer(
        tmp_path / "state",
        None,
        CONDUCTOR_POOL="sim",
        CONDUCTOR_SIM_TIME_SCALE="0.01",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        **env,
    )


def test_the_spans_of_a_run_that_ends_just_before_the_server_stops_are_exported(
    tmp_path: Path, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    # nothing is exported on a timer: only the flush at shutdown sends them
    server = traced_server(tmp_path, endpoint, OTEL_BSP_SCHEDULE_DELAY="600000")
    try:
        token = server.token_file.read_text().strip()
        reply = httpx.post(
            f"http://127.0.0.1:{server.port}/v1/responses",
            json={"model": "conductor/sim", "input": TASK},
            headers={"authorization": f"Bearer {token}"},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        run_id = reply.json()["metadata"]["conductor_run_id"]
        assert received.spans == []
    finally:
        server.stop()  # SIGTERM
    assert server.proc.returncode == 0, server.stderr()[-3000:]
    (root,) = [span for span in received.spans if not span.parent_span_id]
    assert attributes(root)["conductor.run.id"] == run_id and attributes(root)["conductor.run.status"] == "done"
    assert len(received.spans) >= 4  # the run, its plan, its steps and their model calls


CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_run_started_with_the_callers_trace_context_is_a_child_of_the_callers_span(
    tmp_path: Path, receiver: tuple[str, Received], mode: str
) -> None:
    """SEP-414: `traceparent`/`tracestate` in a tools/call's `_meta`, in either protocol era, make the run's root
    span a child of the caller's span; a follow-up's root span is a child of the span that asked for it."""
    endpoint, received = receiver
    server = traced_server(tmp_path, endpoint)
    try:
        token = server.token_file.read_text().strip()
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60)
        async with Client(streamable_http_client(server.url, http_client=http), mode=mode) as client:
            meta: RequestParamsMeta = {
                "traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01",
                "tracestate": "congo=t61rcWkgMzE",
            }
            started = await client.call_tool("orchestrate", {"task": TASK, "wait_seconds": 60}, meta=meta)
            run_id = (started.structured_content or {})["run_id"]
            meta = {"traceparent": f"00-{CALLER_TRACE}-b7ad6b7169203331-01"}
            arguments = {"run_id": run_id, "feedback": "Shorter.", "wait_seconds": 60}
            followed = await client.call_tool("continue_workflow", arguments, meta=meta)
            follow_up_id = (followed.structured_content or {})["run_id"]
            meta = {"traceparent": f"00-{'0' * 32}-b7ad6b7169203331-01"}  # all-zero trace id: invalid, ignored
            alone = await client.call_tool("orchestrate", {"task": TASK, "wait_seconds": 60}, meta=meta)
            alone_id = (alone.structured_content or {})["run_id"]
    finally:
        server.stop()  # SIGTERM: the service closes and flushes its spans
    roots = {attributes(s)["conductor.run.id"]: s for s in received.spans if s.name.startswith("run ")}
    for run, parent in ((run_id, "00f067aa0ba902b7"), (follow_up_id, "b7ad6b7169203331")):
        assert roots[run].trace_id.hex() == CALLER_TRACE, run
        assert roots[run].parent_span_id.hex() == parent, run
        assert roots[run].trace_state == ("congo=t61rcWkgMzE" if run == run_id else "")
    assert roots[alone_id].parent_span_id == b"" and roots[alone_id].trace_id.hex() not in (CALLER_TRACE, "0" * 32)
    steps = [s for s in received.spans if s.name.startswith("step ") and s.trace_id == roots[run_id].trace_id]
    assert {attributes(s)["conductor.run.id"] for s in steps} == {run_id, follow_up_id}


@pytest.mark.parametrize("traced_caller", [True, False])
async def test_a_resumed_run_keeps_its_trace_whoever_resumes_it(
    tmp_path: Path, pool_dir: Path, receiver: tuple[str, Received], traced_caller: bool
) -> None:
    """The MCP SDK makes a request's `_meta` trace context current while its handler runs; a run resumed by a later
    call from another trace must not join that one: it keeps its trace (under the span that started it, if any)."""
    endpoint, received = receiver
    doc = sim_pool_doc()
    doc["workers"][0] |= {"model": "openai/late", "params": {"mock_response": "late answer", "mock_delay": 60}}
    scripted_pool(pool_dir, "resumed", [("model_0", "Solve it.", [])], workers=doc["workers"])
    config = Settings.from_env(state_dir=tmp_path / "state", otlp_endpoint=endpoint).with_pool_dirs_first(pool_dir)
    started_by = TraceContext(traceparent=f"00-{CALLER_TRACE}-00f067aa0ba902b7-01") if traced_caller else None
    async with Service.open(config) as first:
        run = first.start(ask(TASK, pool="resumed", trace=started_by))
        async for event in first.follow(run.id):
            if event.kind == "step_started":
                break
    doc["workers"][0]["params"]["mock_delay"] = 0
    scripted_pool(pool_dir, "resumed", [("model_0", "Solve it.", [])], workers=doc["workers"])
    other_caller = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(1))
    ambient = otel_context.attach(set_span_in_context(NonRecordingSpan(other_caller)))  # as the SDK's handler has it
    try:
        async with Service.open(config) as second:
            done = await second.wait(second.continue_run(run.id).id, None)
    finally:
        otel_context.detach(ambient)
    roots = [s for s in received.spans if s.name.startswith("run ")]
    assert [attributes(r)["conductor.run.status"] for r in roots] == ["interrupted", "done"]
    parent = "00f067aa0ba902b7" if traced_caller else ""
    assert done.status == "done" and (done.trace_id == CALLER_TRACE) == traced_caller
    assert {(r.trace_id.hex(), r.parent_span_id.hex()) for r in roots} == {(done.trace_id, parent)}


def test_an_openai_request_with_w3c_trace_headers_runs_under_the_callers_span(
    tmp_path: Path, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    server = traced_server(tmp_path, endpoint)
    try:
        token = server.token_file.read_text().strip()
        reply = httpx.post(
            f"http://127.0.0.1:{server.port}/v1/chat/completions",
            json={"model": "conductor/sim", "messages": [{"role": "user", "content": TASK}]},
            headers={"authorization": f"Bearer {token}", "traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
    finally:
        server.stop()
    (root,) = [span for span in received.spans if span.name.startswith("run ")]
    assert (root.trace_id.hex(), root.parent_span_id.hex()) == (CALLER_TRACE, "00f067aa0ba902b7")
