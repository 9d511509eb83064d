"""OpenTelemetry traces of runs, sent over OTLP (HTTP/protobuf) when OTEL_EXPORTER_OTLP_ENDPOINT is set.

Every execution of a run is a trace: a `run` span; under it the conductor's `plan` span and one span per step
(a nested step under the conductor step that wrote it); under those, one span per model call made (each retry and
each fallback is an attempt of its own), named and described by the OpenTelemetry GenAI semantic conventions
(gen_ai.request.model, gen_ai.usage.input_tokens/output_tokens, gen_ai.response.finish_reasons). The task, the
prompts, the answers and error texts (a failing agent's stderr quotes its prompt; a provider's error may quote the
request) stay out of the spans unless the operator sets CONDUCTOR_TRACE_CONTENT: a failed span says only what
kind of failure it was (the step's status, the run's `Stop.kind`, the call's exception class). A resumed run
continues the trace its id was stored with (`Run.trace_id`), so one run is one trace however many times it
resumed. A client that sent its trace context with the call that started the run (`traceparent`/`tracestate` in
the request's `_meta`, SEP-414; `Run.trace_parent`) gets the run's root span as a child of its own span.

The spans are made from the run's events and records (telemetry/observer.py), not by the engine: a model call's
span is written when its step ends, from the attempt's recorded start and latency. The tracer provider is the
service's own (not the global one) and is flushed and shut down when the service closes, which a signal that
stops `serve --http` lets happen (doors/http/app.py).
Imported only when traces are configured: opentelemetry is an optional extra (`conductor-mcp[otel]`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote

from conductor_mcp.config import Settings
from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.limits import MAX_CONTENT_CHARS, MAX_ERROR_CHARS
from conductor_mcp.core.records import Attempt, CallUsage, Run, StepRecord
from conductor_mcp.errors import SettingsError
from conductor_mcp.runtime.logs import register_secret

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as missing:  # pragma: no cover - the extra is part of dev installs
    raise SettingsError(
        f"OTEL_EXPORTER_OTLP_ENDPOINT is set but {missing.name} is not installed: pip install 'conductor-mcp[otel]'"
    ) from None

_ERROR_CLASS = re.compile(r"([A-Za-z_][\w.]{0,99})(?=: | after \d)")  # "RateLimitError: ...", "Timeout after 30s"
Messages = Callable[[str, str], list[dict[str, Any]] | None]  # (run id, step key) -> the messages it was sent

_RESUMED_TRACE: ContextVar[int | None] = ContextVar("conductor_resumed_trace", default=None)


class _RunTraceIds(RandomIdGenerator):
    """Random ids, except that the root span of a resumed run's execution takes the trace id the run keeps."""

    def generate_trace_id(self) -> int:
        return _RESUMED_TRACE.get() or super().generate_trace_id()


def traces_url(settings: Settings) -> str:
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (the spec's rule)."""
    if settings.otlp_traces_endpoint:
        return settings.otlp_traces_endpoint
    return f"{(settings.otlp_endpoint or '').rstrip('/')}/v1/traces"


def otlp_headers(value: str | None) -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_HEADERS (`k=v,k2=v2`, values URL-encoded) as a dict; each value is masked in logs."""
    headers: dict[str, str] = {}
    for pair in (value or "").split(","):
        if not pair.strip():
            continue
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise SettingsError("OTEL_EXPORTER_OTLP_HEADERS: each entry must be key=value, comma-separated")
        headers[name.strip()] = unquote(raw.strip())
        register_secret(headers[name.strip()])
    return headers


def open_tracing(settings: Settings, messages: Messages) -> Tracing:
    exporter = OTLPSpanExporter(endpoint=traces_url(settings), headers=otlp_headers(settings.otlp_headers))
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.otel_service_name}),
        id_generator=_RunTraceIds(),
        shutdown_on_exit=False,  # the service's lifespan shuts it down
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider, messages if settings.trace_content else None)


class Tracing:
    """The service's tracer provider; `start` opens the trace of one execution of a run."""

    def __init__(self, provider: TracerProvider, messages: Messages | None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("conductor_mcp")
        self.messages = messages  # None unless prompts and answers may go into spans

    def start(self, run: Run) -> RunTrace:
        return RunTrace(self, run)

    def shutdown(self) -> None:
        """Export every span ended so far, then stop the exporter."""
        self.provider.force_flush()
        self.provider.shutdown()


class RunTrace:
    """The open spans of one execution of a run: the run's, the conductor's while it plans, each running step's."""

    def __init__(self, tracing: Tracing, run: Run) -> None:
        self.tracer = tracing.tracer
        self.messages = tracing.messages
        self.content = tracing.messages is not None  # task, prompt, answer and error texts may go into spans
        attributes: dict[str, Any] = {"conductor.run.id": run.id, "conductor.pool": run.pool}
        if run.trace_id:
            attributes["conductor.run.resumed"] = True
        if self.messages is not None:
            attributes["conductor.run.task"] = run.task[:MAX_CONTENT_CHARS]
        resumed = _RESUMED_TRACE.set(int(run.trace_id, 16) if run.trace_id else None)
        try:
            self.span = self.tracer.start_span(f"run {run.pool}", _caller(run), attributes=attributes)
        finally:
            _RESUMED_TRACE.reset(resumed)
        run.trace_id = format(self.span.get_span_context().trace_id, "032x")
        self.plan: Span | None = None
        self.steps: dict[str, Span] = {}

    def saw(self, run: Run, event: ProgressEvent) -> None:
        if event.kind == "conductor_started":
            self.plan = self.tracer.start_span(f"plan {run.conductor_model}", self._under(self.span))
        elif event.kind == "conductor_finished" and self.plan is not None:
            self._planned(run, self.plan)
            self.plan = None
        elif event.kind == "step_started" and event.step is not None:
            step = event.step
            parent = self.steps.get(step.parent or "", self.span)
            attributes = {"conductor.step.key": step.key, "conductor.step.worker": step.worker_id}
            self.steps[step.key] = self.tracer.start_span(
                f"step {step.key} {step.worker_id}",
                self._under(parent),
                attributes=attributes | {"conductor.run.id": run.id},
            )
        elif event.kind == "step_finished" and event.step is not None:
            self._step_ended(run, event.step)
        elif event.kind == "run_finished":
            self._finished(run)

    def _under(self, parent: Span) -> Any:
        return trace.set_span_in_context(parent)

    def _planned(self, run: Run, span: Span) -> None:
        for call in run.conductor_calls:
            output = call.raw_output if self.messages is not None else None
            self._calls(span, call.attempts, call, None, None, output)
        span.set_attribute("conductor.workflow.steps", len(run.workflow.steps) if run.workflow else 0)
        span.set_attribute("conductor.repairs", len(run.repairs))
        if run.fallback_reason:  # "<what failed>: <detail>", and the detail may quote the conductor's output
            reason = run.fallback_reason if self.content else run.fallback_reason.partition(":")[0]
            span.set_attribute("conductor.fallback_reason", reason)
            span.set_status(Status(StatusCode.ERROR, "the conductor's workflow was replaced by the fallback"))
        span.end()

    def _step_ended(self, run: Run, step: StepRecord) -> None:
        span = self.steps.pop(step.key, None)
        if span is None:
            return
        sent = self.messages(run.id, step.key) if self.messages is not None else None
        output = step.output if self.messages is not None else None
        self._calls(span, step.attempts, step, step.finish_reason, sent, output)
        span.set_attribute("conductor.step.status", step.status)
        if step.stop is not None:
            span.set_attribute("conductor.step.stop", step.stop.kind)
        if step.status != "done":
            span.set_status(Status(StatusCode.ERROR, self._error(step.error, step.status)))
        span.end()

    def _calls(
        self,
        parent: Span,
        attempts: list[Attempt],
        usage: CallUsage,
        finish_reason: str | None,
        sent: list[dict[str, Any]] | None,
        output: str | None,
    ) -> None:
        """One CLIENT span per model call made; the last successful one carries the usage (and, opted in, the
        messages it was sent and the answer)."""
        answered = max((i for i, a in enumerate(attempts) if a.ok), default=None)
        for i, attempt in enumerate(attempts):
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": attempt.model.split("/", 1)[0] if "/" in attempt.model else "openai",
                "gen_ai.request.model": attempt.model,
                "conductor.attempt": i + 1,
                "conductor.fallback": attempt.model != attempts[0].model,
            }
            if i == answered:
                attributes |= _usage(attempt, usage, finish_reason)
                if sent is not None:
                    attributes["gen_ai.input.messages"] = json.dumps(sent)[:MAX_CONTENT_CHARS]
                if output is not None:
                    attributes["gen_ai.output.messages"] = json.dumps(_output_messages(output, finish_reason))[
                        :MAX_CONTENT_CHARS
                    ]
            start = _ns(attempt.started_at)
            span = self.tracer.start_span(
                f"chat {attempt.model}", self._under(parent), SpanKind.CLIENT, attributes, start_time=start
            )
            if not attempt.ok:
                kind = error_class(attempt.error)
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, self._error(attempt.error, kind)))
            span.end(None if start is None else start + int(attempt.latency_s * 1e9))

    def _finished(self, run: Run) -> None:
        for key in list(self.steps):  # cut short with the run
            span = self.steps.pop(key)
            span.set_status(Status(StatusCode.ERROR, "ended with its run"))
            span.end()
        if self.plan is not None:
            self.plan.end()
        self.span.set_attribute("conductor.run.status", run.status)
        if run.stop is not None:
            self.span.set_attribute("conductor.run.stop", run.stop.kind)
        self.span.set_attribute("gen_ai.usage.input_tokens", run.totals.prompt_tokens)
        self.span.set_attribute("gen_ai.usage.output_tokens", run.totals.completion_tokens)
        self.span.set_attribute("conductor.run.cost_usd", run.totals.cost_usd)
        if run.status not in ("done", "planned"):
            kind = run.stop.kind if run.stop is not None else run.status
            self.span.set_status(Status(StatusCode.ERROR, self._error(run.error, kind)))
        self.span.end()

    def _error(self, text: str | None, kind: str) -> str:
        """A failed span's status description: the error's text when content may go into spans, else its kind."""
        return (text or kind)[:MAX_ERROR_CHARS] if self.content else kind


def _caller(run: Run) -> Context:
    """The parent of the run's root span in every execution of the run: the span of the client that started it
    (the W3C trace context it sent), else none. Never the ambient context: the MCP SDK makes each request's `_meta`
    trace context current while the handler runs, and a run resumed by a later call must keep the trace it had."""
    if run.trace_parent is None:
        return Context()
    return TraceContextTextMapPropagator().extract(run.trace_parent.model_dump(exclude_none=True), Context())


def error_class(error: str | None) -> str:
    """The exception class an attempt's error names ("RateLimitError: ...", "Timeout after 30s"), else "error":
    never the message, which may quote the request or what an agent wrote."""
    found = _ERROR_CLASS.match(error or "")
    return found.group(1) if found else "error"


def _usage(attempt: Attempt, usage: CallUsage, finish_reason: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.response.model": attempt.model,
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
    }
    if finish_reason:
        attributes["gen_ai.response.finish_reasons"] = [finish_reason]
    return attributes


def _output_messages(text: str, finish_reason: str | None) -> list[dict[str, Any]]:
    """An answer in the GenAI conventions' output-messages shape."""
    return [{"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": finish_reason}]


def _ns(iso: str | None) -> int | None:
    """An ISO timestamp (as records keep them) in nanoseconds since the epoch."""
    return None if iso is None else int(dt.datetime.fromisoformat(iso).timestamp() * 1e9)
