"""The caller's W3C trace context, which a run's trace continues (SEP-414: `traceparent` and `tracestate` in an
MCP request's `_meta`, the keys the 2026-07-28 specification reserves for OpenTelemetry; on the OpenAI door, the
W3C HTTP headers of the same names).

It comes from the client, so it is checked before it is kept: a `traceparent` must be the W3C version-00 form with
non-zero ids, a `tracestate` at most the W3C limit; anything else is ignored (the run starts a trace of its own),
as W3C Trace Context tells a receiver to do with a header it cannot parse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from conductor_mcp.core.limits import MAX_TRACESTATE_CHARS

TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


class TraceContext(BaseModel):
    """A caller's span, as W3C Trace Context writes it: the run's root span becomes its child."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    traceparent: str = Field(description="00-<trace id>-<parent span id>-<flags>")
    tracestate: str | None = Field(default=None, max_length=MAX_TRACESTATE_CHARS, description="vendors' entries")

    @field_validator("traceparent")
    @classmethod
    def _well_formed(cls, value: str) -> str:
        if not TRACEPARENT.fullmatch(value):
            raise ValueError("not a W3C version-00 traceparent with non-zero ids")
        return value


def trace_context(meta: Mapping[str, object] | None) -> TraceContext | None:
    """The trace context a request's `_meta` (or HTTP headers) carries, or None when none is well formed."""
    if not meta:
        return None
    parent, state = meta.get("traceparent"), meta.get("tracestate")
    if not isinstance(parent, str) or not TRACEPARENT.fullmatch(parent):
        return None
    if not isinstance(state, str) or len(state) > MAX_TRACESTATE_CHARS:
        state = None
    return TraceContext(traceparent=parent, tracestate=state)
