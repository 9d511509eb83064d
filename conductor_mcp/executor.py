"""Runs a workflow: a DAG from the access lists, each step started the moment the steps it sees are done.

The paper ran steps strictly in sequence; a step here waits only for the steps in its access list, so a
fan-out takes the time of its slowest branch. A worker's messages hold the task (and caller's context), the
(instruction, answer) pairs of exactly the steps in its access list, in index order, and its own
instruction: nothing else. Each step's record is committed to the store when it starts and when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from conductor_mcp import providers
from conductor_mcp.logs import get_logger
from conductor_mcp.pool import Pool
from conductor_mcp.store import Store
from conductor_mcp.transcript import Run, StepRecord, messages_digest, now
from conductor_mcp.workflow import Workflow

log = get_logger(__name__)

EventKind = Literal[
    "conductor_started", "conductor_finished", "step_started", "step_finished", "heartbeat", "run_finished"
]


@dataclass
class ProgressEvent:
    kind: EventKind
    run_id: str
    message: str
    step: StepRecord | None = None
    finished_steps: int = 0
    total_steps: int = 0


ProgressCallback = Callable[[ProgressEvent], Awaitable[None]]


async def emit(on_event: ProgressCallback | None, event: ProgressEvent) -> None:
    """Deliver a progress event; a failing listener never breaks the run."""
    if on_event is None:
        return
    try:
        await on_event(event)
    except Exception as exc:
        log.warning("progress_listener_failed", kind=event.kind, error=f"{type(exc).__name__}: {exc}")


def worker_messages(
    task: str, context: str | None, workflow: Workflow, index: int, outputs: dict[int, str]
) -> list[dict[str, Any]]:
    """The one user message a worker receives for step `index`."""
    step = workflow.steps[index]
    parts = [f"# Task\n{task}"]
    if context:
        parts.append(f"# Context\n{context}")
    if step.access:
        seen = [
            f"## Step {j}: instruction\n{workflow.steps[j].instruction}\n\n## Step {j}: answer\n{outputs[j]}"
            for j in step.access
        ]
        parts.append("# Work from your team that you may use\n\n" + "\n\n".join(seen))
    parts.append(f"# Your instruction\n{step.instruction}")
    return [{"role": "user", "content": "\n\n".join(parts)}]


def _estimated_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages) // 4


@dataclass
class CostEstimate:
    low_usd: float
    high_usd: float
    unpriced_workers: list[str]
    assumption: str


def estimate_cost(
    workflow: Workflow, pool: Pool, task: str, context: str | None, low_tokens: int = 150, high_tokens: int = 2000
) -> CostEstimate:
    """A cost range for running a workflow: the real prompts, with each answer assumed low..high tokens long."""
    totals = []
    for answer_tokens in (low_tokens, high_tokens):
        outputs = dict.fromkeys(range(len(workflow.steps)), "x" * (4 * answer_tokens))
        cost = 0.0
        for i, step in enumerate(workflow.steps):
            price = providers.price_per_token(pool.worker(step.worker))
            if price:
                prompt = _estimated_tokens(worker_messages(task, context, workflow, i, outputs))
                cost += prompt * price[0] + answer_tokens * price[1]
        totals.append(round(cost, 6))
    unpriced = sorted(
        {pool.worker(s.worker).id for s in workflow.steps if not providers.price_per_token(pool.worker(s.worker))}
    )
    return CostEstimate(totals[0], totals[1], unpriced, f"each step answers in {low_tokens}-{high_tokens} tokens")


class Executor:
    """Executes one run's workflow on its pool, recording and persisting every step."""

    def __init__(
        self, pool: Pool, store: Store, on_event: ProgressCallback | None = None, step_timeout_s: float = 600.0
    ) -> None:
        self.pool = pool
        self.store = store
        self.on_event = on_event
        self.step_timeout_s = step_timeout_s

    def _prepare_records(self, run: Run, workflow: Workflow) -> None:
        """One record per step; finished records from an earlier attempt of this run are kept as they are."""
        kept = {r.index: r for r in run.steps if r.status == "done" and r.depth == 0}
        records = []
        for i, step in enumerate(workflow.steps):
            if i in kept:
                records.append(kept[i])
                continue
            worker = self.pool.worker(step.worker)
            record = StepRecord(
                key=str(i),
                index=i,
                worker=worker.id,
                visible_id=step.worker,
                model=worker.model,
                instruction=step.instruction,
                access=list(step.access),
            )
            records.append(record)
            self.store.save_step(run.id, i, record, None)
        run.steps = records

    async def execute(self, run: Run) -> None:
        """Run the workflow to the end, a budget stop, a failed step, or cancellation (re-raised)."""
        workflow = run.workflow
        if workflow is None or not workflow.steps:
            raise ValueError(f"run {run.id} has no workflow to execute")
        self._prepare_records(run, workflow)
        outputs = {r.index: r.output or "" for r in run.steps if r.status == "done"}
        pending = [i for i in range(len(workflow.steps)) if i not in outputs]
        running: dict[asyncio.Task[StepRecord], int] = {}
        stop_reason: str | None = None
        try:
            while pending or running:
                if stop_reason is None:
                    for i in [i for i in pending if all(j in outputs for j in workflow.steps[i].access)]:
                        messages = worker_messages(run.task, run.context, workflow, i, outputs)
                        stop_reason = self._over_budget(run, i, messages)
                        if stop_reason:
                            break
                        pending.remove(i)
                        running[asyncio.create_task(self._run_step(run, i, messages))] = i
                if not running:
                    break
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    i = running.pop(task)
                    record = task.result()
                    if record.status == "done":
                        outputs[i] = record.output or ""
                    elif stop_reason is None:
                        stop_reason = f"step {i} ({record.worker}) failed: {record.error}"
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*running, return_exceptions=True)
            self._skip(run, pending, "run cancelled")
            raise
        self._skip(run, pending, stop_reason or "not reached")
        done = [r for r in run.steps if r.status == "done"]
        last = run.steps[-1]
        if stop_reason is None and last.status == "done":
            run.status, run.answer = "done", last.output
        else:
            run.status = "failed"
            run.error = stop_reason or "the last step did not finish"
            run.answer = done[-1].output if done else None  # best answer so far; the error says why it is partial

    def _over_budget(self, run: Run, i: int, messages: list[dict[str, Any]]) -> str | None:
        """Refuse a call that would take the run past its token or USD cap (prompt size estimated)."""
        tokens, usd = run.spent()
        estimate = _estimated_tokens(messages)
        if run.budget.max_tokens is not None and tokens + estimate > run.budget.max_tokens:
            limit = run.budget.max_tokens
            return f"token budget reached: {tokens} spent + ~{estimate} for the next step > {limit}"
        if run.budget.max_usd is not None and run.workflow is not None:
            price = providers.price_per_token(self.pool.worker(run.workflow.steps[i].worker))
            next_cost = estimate * price[0] if price else 0.0
            if usd + next_cost > run.budget.max_usd:
                limit_usd = run.budget.max_usd
                return f"USD budget reached: ${usd:.4f} spent + ~${next_cost:.4f} for the next step > ${limit_usd}"
        return None

    def _skip(self, run: Run, pending: list[int], reason: str) -> None:
        for i in pending:
            record = run.steps[i]
            record.status, record.error = "skipped", reason
            self.store.save_step(run.id, i, record, None)

    async def _run_step(self, run: Run, i: int, messages: list[dict[str, Any]]) -> StepRecord:
        assert run.workflow is not None
        step = run.workflow.steps[i]
        worker = self.pool.worker(step.worker)
        record = run.steps[i]
        record.status, record.started_at = "running", now()
        record.messages_digest = messages_digest(messages)
        self.store.save_step(run.id, i, record, messages)
        log.debug("step_started", run_id=run.id, step=i, worker=worker.id, digest=record.messages_digest)
        total = len(run.steps)
        finished = sum(1 for r in run.steps if r.status == "done")
        await emit(
            self.on_event,
            ProgressEvent(
                "step_started", run.id, f"step {i} started: {step.worker} ({worker.id})", record, finished, total
            ),
        )
        try:
            async with asyncio.timeout(self.step_timeout_s):
                result = await providers.complete(
                    worker,
                    messages,
                    label=worker.id,
                    fallbacks=[(f.id, f) for f in self.pool.fallbacks_of(worker)],
                    metadata=run.metadata,
                )
        except providers.ProviderError as exc:
            record.status, record.error, record.attempts = "failed", str(exc), exc.attempts
        except TimeoutError:
            record.status, record.error = "failed", f"step timed out after {self.step_timeout_s}s"
        except asyncio.CancelledError:
            record.status, record.error, record.ended_at = "cancelled", "cancelled", now()
            self.store.save_step(run.id, i, record, None)
            raise
        else:
            record.status, record.output, record.finish_reason = "done", result.text, result.finish_reason
            record.answered_by, record.attempts = result.answered_by, result.attempts
            record.prompt_tokens, record.completion_tokens = result.prompt_tokens, result.completion_tokens
            record.cost_usd, record.latency_s = result.cost_usd, round(result.latency_s, 4)
        record.ended_at = now()
        self.store.save_step(run.id, i, record, None)
        log.debug("step_finished", run_id=run.id, step=i, status=record.status, tokens=record.completion_tokens)
        finished = sum(1 for r in run.steps if r.status == "done")
        await emit(
            self.on_event,
            ProgressEvent(
                "step_finished",
                run.id,
                f"step {i} {record.status}: {step.worker} ({worker.id})",
                record,
                finished,
                total,
            ),
        )
        return record
