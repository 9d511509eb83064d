"""What a caller asks for: one frozen request that declares every limit once.

Doors build a `RunRequest` from their own arguments (MCP tool arguments, CLI flags, an OpenAI request); the
MCP tools reuse the annotated types below for their argument schemas, so a limit is written in one place.
Bad values raise RequestError naming the field and the limit.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from conductor_mcp.core.choice import WorkerChoice
from conductor_mcp.core.limits import (
    MAX_CONTEXT_CHARS,
    MAX_FEEDBACK_CHARS,
    MAX_FILES,
    MAX_STEPS,
    MAX_TASK_CHARS,
    MAX_TOOLS,
    MAX_TOOLS_CHARS,
)
from conductor_mcp.core.principal import LOCAL_NAME
from conductor_mcp.core.trace_context import TraceContext
from conductor_mcp.core.usage import Budget
from conductor_mcp.errors import RequestError, RequestTooLarge

TaskText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="The task, stated completely: workers see only this, `context`, and the steps they are shown.",
    ),
]
ContextText = Annotated[
    str | None,
    Field(
        max_length=MAX_CONTEXT_CHARS,
        description="Code, files, logs or facts the workers need, as text. Every worker sees it.",
    ),
]
StepLimit = Annotated[
    int | None,
    Field(ge=1, le=MAX_STEPS, description="Most steps the conductor may use. Default: the pool's limit."),
]
FeedbackText = Annotated[
    str | None,
    Field(
        max_length=MAX_FEEDBACK_CHARS,
        description="What was wrong or missing; starts a follow-up run in which the conductor sees the earlier "
        "steps and this feedback (workers see the feedback too).",
    ),
]
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
# How much of the team a reasoning effort asks for (OpenAI's `reasoning.effort`): RunRequest fields.
EFFORT_LIMITS: dict[str, dict[str, Any]] = {
    "none": {"max_steps": 1},
    "minimal": {"max_steps": 1},
    "low": {"max_steps": 2},
    "medium": {},
    "high": {"max_steps": MAX_STEPS},
    "xhigh": {"max_steps": MAX_STEPS, "self_correct": True},
}
POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]*$"  # names on the pool search path only: never a file path
PoolName = Annotated[
    str | None,
    Field(
        pattern=POOL_NAME,
        max_length=100,
        description="Pool of workers to use (see the `pools` tool). Default: the server's default.",
    ),
]


class FileRef(BaseModel):
    """A file a caller named, as the run records it: what every worker saw, checkable later."""

    path: str
    size: int = Field(description="bytes")
    sha256: str


WorkersArg = Annotated[
    WorkerChoice | None,
    Field(
        description="Which of the pool's workers may work on this task, by pool id (the `pools` tool lists them): "
        "`only` keeps just those, `exclude` drops those. Fallbacks stay inside the choice. Default: all of them.",
    ),
]
FilesArg = Annotated[
    list[str] | None,
    Field(
        max_length=MAX_FILES,
        description="Paths of text files the workers need (read by the server, each shown with its path). They "
        "must lie inside your roots (or the server's working directory); counts toward the context limit.",
    ),
]


class RunRequest(BaseModel):
    """A run as the caller asked for it. `pool` may also be a YAML path where the door allows one (the CLI)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: TaskText
    pool: str | None = None
    max_steps: StepLimit = None
    context: ContextText = None
    metadata: dict[str, Any] = Field(default_factory=dict, description="task metadata (the simulator's reference)")
    budget: Budget = Field(default_factory=Budget)
    self_correct: bool | None = Field(default=None, description="None: the pool's setting")
    files: tuple[FileRef, ...] = Field(default=(), description="files read into the context, for the record")
    tools: tuple[dict[str, Any], ...] = Field(
        default=(), description="the client's function tools (chat format), for the final step"
    )
    workspace: str | None = Field(
        default=None, description="the caller's repository (an absolute path the door checked against the roots)"
    )
    keep_workspaces: bool = Field(default=False, description="leave agent workspaces on disk after the run")
    workers: WorkerChoice | None = Field(default=None, description="the caller's choice of workers (pool ids)")
    principal: str = Field(default=LOCAL_NAME, description="who asks: the run is theirs (core/principal.py)")
    trace: TraceContext | None = Field(default=None, description="the caller's trace, which the run's continues")

    @field_validator("task")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a non-empty string")
        return value

    @field_validator("tools")
    @classmethod
    def _tools_bounded(cls, value: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        if len(value) > MAX_TOOLS:
            raise ValueError(f"{len(value)} function tools, over the limit of {MAX_TOOLS}")
        size = len(json.dumps(value))
        if size > MAX_TOOLS_CHARS:
            raise ValueError(f"the tool definitions come to {size} characters, over the limit of {MAX_TOOLS_CHARS}")
        return value

    @classmethod
    def of(cls, **fields: Any) -> RunRequest:
        """Build and validate keyword arguments; a bad one raises RequestError naming the field and the limit."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            errors = exc.errors()
            kind = RequestTooLarge if all(_too_large(error) for error in errors) else RequestError
            raise kind("; ".join(_describe(error) for error in errors)) from None

    def but(self, **changes: Any) -> RunRequest:
        """A copy with some fields changed (follow-up runs), validated like a new request."""
        return RunRequest.of(**{**self.model_dump(), **changes})


def _too_large(error: Any) -> bool:
    """A size limit (a door may answer it as 413), not a malformed value."""
    return error["type"] in ("string_too_long", "too_long") or "over the limit" in str(error["msg"])


def _describe(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "request"
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "string_too_short" or (kind == "value_error" and field == "task"):
        return f"{field}: must be a non-empty string"
    if kind == "string_too_long":
        return f"{field}: {len(value)} characters exceeds the limit of {ctx['max_length']}"
    if field == "max_steps" and kind in ("greater_than_equal", "less_than_equal"):
        return f"{field}: must be between 1 and {MAX_STEPS}, got {value}"
    return f"{field}: {str(error['msg']).removeprefix('Value error, ')}"
