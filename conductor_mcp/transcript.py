"""Provenance: what every step and every conductor call did, and the renderings users read.

A Run is the unit that is stored, shown and continued. Each StepRecord says which model answered what
instruction having seen which steps, at what cost; the exact messages are kept in the store, and the record
carries their digest so a transcript can be checked against them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from conductor_mcp.workflow import Repair, Workflow

RunStatus = Literal["planned", "running", "done", "failed", "interrupted", "cancelled"]
StepStatus = Literal["pending", "running", "done", "failed", "cancelled", "skipped"]


def messages_digest(messages: list[dict[str, Any]]) -> str:
    """Identifies the exact messages a model received (the messages themselves are kept in the store)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class Attempt(BaseModel):
    """One provider call made for a step or a conductor call (retries and fallbacks each add one)."""

    model: str
    worker: str | None = None
    ok: bool
    error: str | None = None
    latency_s: float = 0.0


class CallUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


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
    worker: str = Field(description="pool worker id")
    visible_id: str = Field(description="the id the conductor used for this worker")
    model: str = Field(description="the litellm model configured for the worker")
    answered_by: str | None = Field(None, description="the model that actually answered, after fallbacks")
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
    conductor_call: ConductorCall | None = Field(None, description="for a conductor step: its call, raw output")
    workflow: Workflow | None = Field(None, description="for a conductor step: the corrective workflow it wrote")
    inherited_from: str | None = Field(None, description="run this finished step was taken from (continuations)")
    truncated_inputs: list[int] = Field(
        default_factory=list, description="seen steps whose output was cut to the size limit for this step"
    )


class Totals(BaseModel):
    steps: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    conductor_tokens: int = 0
    conductor_cost_usd: float = 0.0
    wall_s: float = 0.0


class Budget(BaseModel):
    max_tokens: int | None = Field(None, ge=1)
    max_usd: float | None = Field(None, gt=0)


class ServerBudget(BaseModel):
    """Caps on what one server process may spend across all its runs (CONDUCTOR_SERVER_MAX_TOKENS / _USD)."""

    max_tokens: int | None = None
    max_usd: float | None = None
    tokens: int = 0
    usd: float = 0.0

    def add(self, usage: CallUsage) -> None:
        self.tokens += usage.prompt_tokens + usage.completion_tokens
        self.usd += usage.cost_usd

    def exhausted(self) -> str | None:
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"server token budget exhausted: {self.tokens} of {self.max_tokens} spent"
        if self.max_usd is not None and self.usd >= self.max_usd:
            return f"server USD budget exhausted: ${self.usd:.4f} of ${self.max_usd} spent"
        return None

    def exceeded_by(self, tokens: int, usd: float) -> str | None:
        """Why spending this much more would pass a cap, or None."""
        if self.max_tokens is not None and self.tokens + tokens > self.max_tokens:
            return f"server token budget reached: {self.tokens} spent + ~{tokens} > {self.max_tokens}"
        if self.max_usd is not None and self.usd + usd > self.max_usd:
            return f"server USD budget reached: ${self.usd:.4f} spent + ~${usd:.4f} > ${self.max_usd}"
        return None


class Run(BaseModel):
    id: str
    task: str
    context: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    pool: str
    pool_digest: str
    conductor_model: str
    max_steps: int
    budget: Budget = Field(default_factory=Budget)
    self_correct: bool = False
    max_depth: int = 2
    max_calls: int = Field(10, description="most step and recursive conductor calls in the whole run")
    stop_reason: str | None = Field(None, description="why the run stopped early with its best answer, if it did")
    status: RunStatus = "planned"
    parent_id: str | None = None
    owner: str | None = Field(None, description="lease token of the process executing the run")
    created_at: str = Field(default_factory=now)
    updated_at: str = Field(default_factory=now)
    started_at: str | None = None
    ended_at: str | None = None
    conductor_calls: list[ConductorCall] = Field(default_factory=list)
    workflow: Workflow | None = None
    repairs: list[Repair] = Field(default_factory=list)
    fallback_reason: str | None = Field(None, description="why the conductor's workflow was replaced, if it was")
    steps: list[StepRecord] = Field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    totals: Totals = Field(default_factory=Totals)

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
        conductor_usages: list[CallUsage] = [*self.conductor_calls, *(s for s in own_steps if s.worker == "conductor")]
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


# ------------------------------------------------------------------------------------------- renderings


def _excerpt(text: str | None, limit: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def worker_label(step: StepRecord) -> str:
    """The id the conductor used, with the pool's worker id when the pool is anonymised."""
    return step.visible_id if step.visible_id == step.worker else f"{step.visible_id} ({step.worker})"


def _node(key: str) -> str:
    return "s" + key.replace(".", "_")


def mermaid(run: Run) -> str:
    """The workflow's topology: who saw whom. Steps with no edge between them ran in parallel; a corrective
    workflow hangs off the conductor step that wrote it (dotted edges)."""
    lines = ["flowchart LR", '  task(["task"])']
    for step in run.steps:
        lines.append(f'  {_node(step.key)}["{step.key}: {worker_label(step)}"]')
        if not step.access:
            lines.append(
                f"  {_node(step.parent)} -.-> {_node(step.key)}" if step.parent else f"  task --> {_node(step.key)}"
            )
        for source in step.access:
            source_key = f"{step.parent}.{source}" if step.parent else str(source)
            lines.append(f"  {_node(source_key)} --> {_node(step.key)}")
    return "\n".join(lines)


def to_markdown(run: Run, answer_limit: int = 6000, instruction_limit: int = 80) -> str:
    """A compact summary for people and calling models: answer first, then the step table and topology."""
    t = run.totals
    parts = [f"## Answer\n\n{_excerpt_block(run.answer, answer_limit)}"]
    if run.error:
        parts.append(f"**Error:** {run.error}")
    parts.append(
        f"**Run** `{run.id}` · status **{run.status}** · pool `{run.pool}` · "
        f"{t.steps} steps, {t.calls} calls, {t.total_tokens} tokens, ${t.cost_usd:.4f}, {t.wall_s:.1f}s"
    )
    if run.stop_reason:
        parts.append(f"**Stopped early:** {run.stop_reason}")
    if run.fallback_reason:
        parts.append(f"**Conductor fallback:** {run.fallback_reason}")
    if run.repairs:
        parts.append("**Repairs:** " + "; ".join(f"{r.fault} → {r.action}" for r in run.repairs))
    if run.steps:
        rows = [
            "| # | worker | instruction | sees | status | tokens | cost | latency |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in sorted(run.steps, key=lambda step: [int(part) for part in step.key.split(".")]):
            sees = ",".join(map(str, s.access)) or "task"
            instruction = _cell(_excerpt(s.instruction, instruction_limit))
            tokens = s.prompt_tokens + s.completion_tokens
            key = "↳ " * s.depth + s.key
            rows.append(
                f"| {key} | {_cell(worker_label(s))} | {instruction} | {sees} | {s.status} "
                f"| {tokens} | ${s.cost_usd:.4f} | {s.latency_s:.2f}s |"
            )
        parts.append("\n".join(rows))
        parts.append(f"```mermaid\n{mermaid(run)}\n```")
    elif run.workflow and run.workflow.steps:
        rows = ["| # | worker | instruction | sees |", "|---|---|---|---|"]
        for i, step in enumerate(run.workflow.steps):
            sees = ",".join(map(str, step.access)) or "task"
            rows.append(
                f"| {i} | {_cell(step.worker)} | {_cell(_excerpt(step.instruction, instruction_limit))} | {sees} |"
            )
        parts.append(
            "**Planned workflow** (not run yet)" + (f": {run.workflow.reasoning}" if run.workflow.reasoning else "")
        )
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _excerpt_block(text: str | None, limit: int) -> str:
    if not text:
        return "_(no answer)_"
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n\n… ({len(text) - limit} more characters in the full transcript)"
    )
