"""Provenance records: what every step and every conductor call did.

A Run is the unit that is stored, shown and continued. Each StepRecord says which model answered what
instruction having seen which steps, at what cost; the exact messages are kept in the store, and the record
carries their digest so a transcript can be checked against them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
from typing import Any, Literal, get_args

from pydantic import AliasChoices, BaseModel, Field, model_validator

from conductor_mcp.core.agent_records import StepWork
from conductor_mcp.core.choice import WorkerChoice
from conductor_mcp.core.outcome import Stop, legacy_stop
from conductor_mcp.core.pool import CONDUCTOR_ID
from conductor_mcp.core.principal import LOCAL_NAME
from conductor_mcp.core.request import FileRef, RunRequest
from conductor_mcp.core.trace_context import TraceContext
from conductor_mcp.core.usage import Budget, CallUsage, Totals
from conductor_mcp.core.workflow import Repair, Step, Workflow

RunStatus = Literal["planned", "running", "done", "failed", "interrupted", "cancelled"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
StepStatus = Literal["pending", "running", "done", "failed", "cancelled", "skipped"]


def messages_digest(messages: list[dict[str, Any]]) -> str:
    """Identifies the exact messages a model received (the messages themselves are kept in the store)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def now(timespec: str = "milliseconds") -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec=timespec)


def new_run_id() -> str:
    """Random, not sequential: one user's run ids tell nothing about another's."""
    return secrets.token_hex(8)


class Attempt(BaseModel):
    """One provider call made for a step or a conductor call (retries and fallbacks each add one)."""

    model: str
    worker: str | None = None
    ok: bool
    error: str | None = None
    latency_s: float = 0.0
    started_at: str | None = None  # when the call was sent (a trace's span of it starts there)


class ToolCall(BaseModel):
    """A call of one of the client's tools that the final worker asked for; the client runs it (OpenAI door).
    The id names the run and step (see core/client_tools.py), so the client's reply finds its way back."""

    id: str
    name: str
    arguments: str = Field(default="{}", description="JSON text, as the model wrote it")


class ToolResult(BaseModel):
    """What the client's tool returned for one ToolCall."""

    call_id: str
    output: str


class ConductorCall(CallUsage):
    """One call to the conductor model, with its raw output kept verbatim."""

    model: str
    raw_output: str | None = None
    error: str | None = None
    repairs: list[Repair] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)


class StepRecord(CallUsage):
    key: str = Field(description="unique within the run: the step index, nested as 'parent.index' for recursion")
    index: int
    depth: int = 0
    parent: str | None = None
    worker_id: str = Field(
        description="the pool's id of the worker ('conductor' for the conductor itself)",
        validation_alias=AliasChoices("worker_id", "worker"),  # runs stored before the rename say "worker"
    )
    visible_id: str = Field(description="the id the conductor used for this worker")
    model: str = Field(description="the litellm model configured for the worker")
    answered_by: str | None = Field(default=None, description="the model that actually answered, after fallbacks")
    instruction: str
    access: list[int] = Field(default_factory=list)
    messages_digest: str | None = None
    status: StepStatus = "pending"
    output: str | None = None
    finish_reason: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    error: str | None = None
    conductor_call: ConductorCall | None = Field(default=None, description="for a conductor step: its call, raw output")
    workflow: Workflow | None = Field(
        default=None, description="for a conductor step: the corrective workflow it wrote"
    )
    inherited_from: str | None = Field(
        default=None, description="run this finished step was taken from (continuations)"
    )
    truncated_inputs: list[int] = Field(
        default_factory=list, description="seen steps whose output was cut to the size limit for this step"
    )
    tool_calls: list[ToolCall] = Field(default_factory=list, description="the client's tools this step called")
    tool_results: list[ToolResult] = Field(
        default_factory=list,
        description="a tool turn: the client's results for the previous step's tool calls, given to the same worker",
    )
    recovery: bool = Field(default=False, description="a conductor step that re-planned after a step failed")
    stop: Stop | None = Field(
        default=None, description="the limit that held this step back (skipped) or cut its corrective workflow short"
    )
    work: StepWork | None = Field(default=None, description="an agent's or tool-using model's workspace and change")

    @property
    def order(self) -> tuple[int, ...]:
        """The step's place in the workflow tree: nested steps come after their parent's earlier siblings."""
        return tuple(int(part) for part in self.key.split("."))

    def label(self) -> str:
        """The id the conductor used, with the pool's worker id when the pool is anonymised."""
        return self.visible_id if self.visible_id == self.worker_id else f"{self.visible_id} ({self.worker_id})"


class Run(BaseModel):
    id: str
    task: str
    context: str | None = None
    files: list[FileRef] = Field(default_factory=list, description="files read into the context: path, size, sha256")
    metadata: dict[str, Any] = Field(default_factory=dict)
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="the client's function tools (chat format), offered to the final step"
    )
    pool: str
    pool_digest: str
    workers: WorkerChoice | None = Field(default=None, description="the caller's choice of workers, as asked")
    worker_ids: list[str] | None = Field(
        default=None, description="the pool ids the run may use, when fewer than the pool's (see core/choice.py)"
    )
    conductor_model: str
    max_steps: int
    budget: Budget = Field(default_factory=Budget)
    self_correct: bool = False
    workspace: str | None = Field(default=None, description="the caller's repository agent steps work on")
    keep_workspaces: bool = Field(default=False, description="leave the run's workspaces on disk for inspection")
    max_depth: int = 2
    max_calls: int = Field(default=10, description="most step and recursive conductor calls in the whole run")
    stop: Stop | None = Field(default=None, description="what ended the run (set by the engine once it ends)")
    status: RunStatus = "planned"
    parent_id: str | None = None
    principal: str = Field(default=LOCAL_NAME, description="who started the run: only it (and admins) may see it")
    owner: str | None = Field(default=None, description="lease token of the process executing the run")
    trace_id: str | None = Field(default=None, description="its OpenTelemetry trace (32 hex digits), when traced")
    trace_parent: TraceContext | None = Field(
        default=None, description="the caller's span its trace continues (W3C trace context), when it sent one"
    )
    created_at: str = Field(default_factory=now)
    updated_at: str = Field(default_factory=now)
    started_at: str | None = None
    ended_at: str | None = None
    conductor_calls: list[ConductorCall] = Field(default_factory=list)
    workflow: Workflow | None = None
    repairs: list[Repair] = Field(default_factory=list)
    fallback_reason: str | None = Field(
        default=None, description="why the conductor's workflow was replaced, if it was"
    )
    steps: list[StepRecord] = Field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    totals: Totals = Field(default_factory=Totals)

    @model_validator(mode="before")
    @classmethod
    def _typed_stop(cls, data: Any) -> Any:
        """A run stored before outcomes were typed says why it stopped early in `stop_reason` only."""
        if isinstance(data, dict) and data.get("stop_reason") and not data.get("stop"):
            data = {**data, "stop": legacy_stop(data["stop_reason"])}
        return data

    def best_answer(self) -> str | None:
        """The answer so far: the output of the latest finished step in workflow order (never timing)."""
        finished = [step for step in self.steps if step.status == "done" and step.output]
        return max(finished, key=lambda step: step.order).output if finished else None

    def request(self) -> RunRequest:
        """The request this run carries out (a follow-up copies it with changes)."""
        return RunRequest(
            task=self.task,
            pool=self.pool,
            max_steps=self.max_steps,
            context=self.context,
            metadata=self.metadata,
            budget=self.budget,
            self_correct=self.self_correct,
            files=tuple(self.files),
            tools=tuple(self.tools),
            workspace=self.workspace,
            keep_workspaces=self.keep_workspaces,
            workers=self.workers,
            principal=self.principal,
        )

    def follow(self, parent: Run, review: Step) -> None:
        """Make this new run a follow-up of `parent`: the parent's finished steps, taken over as they are, then
        `review` (the conductor as a worker who sees them all and the caller's feedback)."""
        assert parent.workflow is not None
        self.parent_id, self.max_depth = parent.id, max(self.max_depth, 1)
        self.workflow = Workflow(
            reasoning=f"Follow-up of run {parent.id}: the conductor reviews it with the caller's feedback.",
            steps=[*parent.workflow.steps, review],
        )
        self.steps = [
            step.model_copy(update={"inherited_from": parent.inherited_origin(step)})
            for step in parent.steps
            if step.status == "done"
        ]

    def mark_interrupted(self) -> list[int]:
        """Record that the process running this run died: the run interrupted, its running steps cancelled.
        Returns those steps' positions (for Store.update)."""
        self.status, self.error = "interrupted", "the process running it stopped; continue_workflow resumes it"
        self.stop = Stop(kind="interrupted", detail=self.error)
        changed = [position for position, step in enumerate(self.steps) if step.status == "running"]
        for position in changed:
            self.steps[position].status, self.steps[position].error = "cancelled", "interrupted"
        return changed

    def inherited_origin(self, step: StepRecord) -> str:
        """The run that paid for a step: its own origin if it was taken over from further back, else this run."""
        return step.inherited_from or self.id

    def own_usages(self) -> list[CallUsage]:
        """Every call this run made (steps taken over from a parent run were paid for there)."""
        return [*self.conductor_calls, *(s for s in self.steps if s.inherited_from is None)]

    def spent(self) -> tuple[int, float]:
        """Tokens and USD spent so far by the conductor and every step, for budget checks."""
        usages = self.own_usages()
        return sum(u.prompt_tokens + u.completion_tokens for u in usages), sum(u.cost_usd for u in usages)

    def recompute_totals(self) -> None:
        own_steps = [s for s in self.steps if s.inherited_from is None]
        conductor_usages: list[CallUsage] = [
            *self.conductor_calls,
            *(s for s in own_steps if s.worker_id == CONDUCTOR_ID),
        ]
        tokens, cost = self.spent()
        wall = 0.0
        if self.started_at and self.ended_at:
            wall = (
                dt.datetime.fromisoformat(self.ended_at) - dt.datetime.fromisoformat(self.started_at)
            ).total_seconds()
        self.totals = Totals(
            steps=sum(1 for s in own_steps if s.status == "done"),
            calls=sum(len(s.attempts) for s in own_steps) + sum(max(1, len(c.attempts)) for c in self.conductor_calls),
            prompt_tokens=sum(u.prompt_tokens for u in self.own_usages()),
            completion_tokens=sum(u.completion_tokens for u in self.own_usages()),
            total_tokens=tokens,
            cost_usd=round(cost, 8),
            conductor_tokens=sum(u.prompt_tokens + u.completion_tokens for u in conductor_usages),
            conductor_cost_usd=round(sum(u.cost_usd for u in conductor_usages), 8),
            wall_s=round(wall, 3),
        )
