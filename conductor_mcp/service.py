"""plan / orchestrate / run a stored plan / status: the operations every front end (CLI, MCP server) shares.

Arguments are validated here, once, with errors that name the field; every state change of a run is written
to the store before the caller hears of it, so nothing already computed is lost.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import anyio

from conductor_mcp.conductor import SELF_CHECK_INSTRUCTION, continuation_step, plan_workflow
from conductor_mcp.config import MAX_CONTEXT_CHARS, MAX_STEPS_LIMIT, MAX_TASK_CHARS, Settings
from conductor_mcp.doctor import default_pool
from conductor_mcp.executor import Executor, ProgressCallback, ProgressEvent, emit
from conductor_mcp.leases import Lease
from conductor_mcp.logs import get_logger
from conductor_mcp.pool import CONDUCTOR_ID, Pool, PoolError, available_pools, load_pool
from conductor_mcp.store import RunNotFound, Store
from conductor_mcp.transcript import Budget, Run, ServerBudget, now
from conductor_mcp.workflow import Step, Workflow

log = get_logger(__name__)

__all__ = ["PoolSummary", "RequestError", "RunNotFound", "Service"]


class RequestError(ValueError):
    """A caller's argument is unusable; the message names the argument and the limit."""


@dataclass
class PoolSummary:
    name: str
    path: str
    workers: list[str]
    conductor: str | None
    description: str
    error: str | None = None


def new_run_id() -> str:
    """Random, not sequential: one user's run ids tell nothing about another's."""
    return secrets.token_hex(8)


class Service:
    def __init__(self, settings: Settings | None = None, store: Store | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.store = store or Store(self.settings.db_path)
        self.lease = Lease(self.settings.state_dir)
        self._pools: dict[str, Pool] = {}
        self._active: dict[str, tuple[Run, asyncio.Task[Run]]] = {}
        self._listeners: dict[str, list[ProgressCallback]] = defaultdict(list)
        self._closing = False
        self._default_pool: str | None = None
        self.server_budget = ServerBudget(
            max_tokens=self.settings.server_max_tokens, max_usd=self.settings.server_max_usd
        )

    # -- pools ------------------------------------------------------------------------------------
    def default_pool_name(self) -> str:
        """CONDUCTOR_POOL, else the first pool whose API keys are all set, else the local pool."""
        if self._default_pool is None:
            self._default_pool = self.settings.default_pool or default_pool(list(self.settings.pool_dirs))
        return self._default_pool

    def pool(self, name: str | None = None) -> Pool:
        key = name or self.default_pool_name()
        if key not in self._pools:
            self._pools[key] = load_pool(key, list(self.settings.pool_dirs))
        return self._pools[key]

    def register_pool(self, pool: Pool) -> None:
        """Make a pool built in code (a training sub-pool, say) available by its name."""
        self._pools[pool.name] = pool

    def pools(self) -> list[PoolSummary]:
        """Every pool on the search path, each validated; a broken file is listed with its error."""
        summaries = []
        for name, path in available_pools(list(self.settings.pool_dirs)).items():
            try:
                pool = load_pool(str(path), [])
            except PoolError as exc:
                summaries.append(PoolSummary(name, str(path), [], None, "", error=str(exc)))
                continue
            self._pools.setdefault(name, pool)  # later lookups by name reuse what was just validated
            summaries.append(
                PoolSummary(name, str(path), [w.id for w in pool.workers], pool.conductor.model, pool.description)
            )
        return summaries

    # -- runs -------------------------------------------------------------------------------------
    def _new_run(
        self,
        task: str,
        pool_name: str | None,
        max_steps: int | None,
        context: str | None,
        metadata: dict[str, Any] | None,
        budget: Budget | None,
        self_correct: bool | None = None,
    ) -> tuple[Run, Pool]:
        if not isinstance(task, str) or not task.strip():
            raise RequestError("task: must be a non-empty string")
        exhausted = self.server_budget.exhausted()
        if exhausted:
            raise RequestError(f"server: {exhausted}; no new runs until the server restarts")
        if len(task) > MAX_TASK_CHARS:
            raise RequestError(f"task: {len(task)} characters exceeds the limit of {MAX_TASK_CHARS}")
        if context is not None and len(context) > MAX_CONTEXT_CHARS:
            raise RequestError(f"context: {len(context)} characters exceeds the limit of {MAX_CONTEXT_CHARS}")
        try:
            pool = self.pool(pool_name)
        except PoolError as exc:
            raise RequestError(f"pool: {exc}") from None
        steps = pool.max_steps if max_steps is None else max_steps
        if not 1 <= steps <= MAX_STEPS_LIMIT:
            raise RequestError(f"max_steps: must be between 1 and {MAX_STEPS_LIMIT}, got {steps}")
        run = Run(
            id=new_run_id(),
            task=task,
            context=context or None,
            metadata=dict(metadata or {}),
            pool=pool.name,
            pool_digest=pool.digest(),
            conductor_model=pool.conductor.model,
            max_steps=steps,
            budget=budget or Budget(),
            self_correct=pool.self_correct if self_correct is None else self_correct,
            max_depth=pool.max_depth,
            max_calls=2 * steps,
        )
        return run, pool

    async def _conduct(self, run: Run, pool: Pool, on_event: ProgressCallback | None) -> None:
        await emit(on_event, ProgressEvent("conductor_started", run.id, f"conductor {pool.conductor.model} planning"))
        plan = await plan_workflow(pool, run.task, run.context, run.max_steps, run.metadata)
        for call in plan.calls:
            self.server_budget.add(call)
        if run.self_correct and plan.workflow.steps[-1].worker != CONDUCTOR_ID:
            every_step = list(range(len(plan.workflow.steps)))
            plan.workflow.steps.append(Step(worker=CONDUCTOR_ID, instruction=SELF_CHECK_INSTRUCTION, access=every_step))
        run.workflow, run.conductor_calls = plan.workflow, plan.calls
        run.repairs, run.fallback_reason = plan.repairs, plan.fallback_reason
        self.store.save_run(run)
        message = f"workflow of {len(plan.workflow.steps)} steps" + (" (fallback)" if plan.fallback_reason else "")
        await emit(on_event, ProgressEvent("conductor_finished", run.id, message, total_steps=len(plan.workflow.steps)))

    async def plan(
        self,
        task: str,
        pool: str | None = None,
        max_steps: int | None = None,
        context: str | None = None,
        metadata: dict[str, Any] | None = None,
        budget: Budget | None = None,
        on_event: ProgressCallback | None = None,
        self_correct: bool | None = None,
    ) -> Run:
        """The conductor's workflow, stored as a `planned` run; no worker is called."""
        run, pool_ = self._new_run(task, pool, max_steps, context, metadata, budget, self_correct)
        self.store.save_run(run)
        await self._conduct(run, pool_, on_event)
        run.recompute_totals()
        self.store.save_run(run)
        return run

    async def orchestrate(
        self,
        task: str,
        pool: str | None = None,
        max_steps: int | None = None,
        context: str | None = None,
        metadata: dict[str, Any] | None = None,
        budget: Budget | None = None,
        on_event: ProgressCallback | None = None,
        self_correct: bool | None = None,
    ) -> Run:
        """Plan and run to the end; returns the finished (or failed) run. Cancelling the caller cancels the run."""
        run = self.start(task, pool, max_steps, context, metadata, budget, self_correct=self_correct)
        return await self.wait(run.id, None, on_event)

    def start(
        self,
        task: str,
        pool: str | None = None,
        max_steps: int | None = None,
        context: str | None = None,
        metadata: dict[str, Any] | None = None,
        budget: Budget | None = None,
        self_correct: bool | None = None,
        workflow: Workflow | None = None,
    ) -> Run:
        """Validate, store and start a run in the background; `wait` collects it.

        With `workflow` the conductor is not asked: that workflow runs as given (baselines, replays).
        """
        run, pool_ = self._new_run(task, pool, max_steps, context, metadata, budget, self_correct)
        if workflow is not None:
            run.workflow = self._checked(workflow, pool_)
        self._launch(run, pool_)
        return run

    def _checked(self, workflow: Workflow, pool: Pool) -> Workflow:
        if not workflow.steps:
            raise RequestError("workflow: must have at least one step")
        for i, step in enumerate(workflow.steps):
            if step.worker != CONDUCTOR_ID and step.worker not in pool.visible_ids():
                raise RequestError(f"workflow: step {i} names unknown worker {step.worker!r}")
            if any(not 0 <= j < i for j in step.access):
                raise RequestError(f"workflow: step {i} may only see earlier steps, got {step.access}")
        return workflow

    def continue_run(self, run_id: str, feedback: str | None = None) -> Run:
        """Collect, resume or follow up a run; returns the run to `wait` on (a new one when there is feedback).

        - running here: the same run, to collect;
        - planned: its stored plan starts;
        - interrupted, failed or cancelled: it resumes; finished steps are kept and not called again;
        - with feedback (any run not running): a follow-up run (see `_follow_up`) that links to its parent.
        """
        run = self.status(run_id)
        if run.id in self._active:
            if feedback:
                raise RequestError(f"feedback: run {run_id} is still running; collect it before giving feedback")
            return self._active[run.id][0]
        if run.status == "running":
            raise RequestError(f"run_id: run {run_id} is running in another server process")
        if feedback is not None:
            return self._follow_up(run, feedback)
        if run.status == "done":
            return run
        try:
            pool_ = self.pool(run.pool)
        except PoolError as exc:
            raise RequestError(f"pool: {exc}") from None
        if pool_.digest() != run.pool_digest:
            log.warning("pool_changed_since_run_started", run_id=run_id, pool=run.pool)
        run.error = None
        self._launch(run, pool_)
        return run

    def _follow_up(self, parent: Run, feedback: str) -> Run:
        """A child run: the parent's finished steps, taken over as they are, then the conductor as a worker
        who sees them all and the caller's feedback, and writes a corrective workflow or stops."""
        if not feedback.strip():
            raise RequestError("feedback: must not be empty when given")
        if len(feedback) > MAX_TASK_CHARS:
            raise RequestError(f"feedback: {len(feedback)} characters exceeds the limit of {MAX_TASK_CHARS}")
        if parent.workflow is None or not parent.workflow.steps:
            raise RequestError(f"run_id: run {parent.id} has no workflow to follow up; orchestrate the task again")
        context = f"Feedback from the caller on an earlier answer: {feedback}"
        context = f"{parent.context}\n\n{context}" if parent.context else context
        run, pool = self._new_run(parent.task, parent.pool, parent.max_steps, context[-MAX_CONTEXT_CHARS:],
                                  parent.metadata, parent.budget, self_correct=False)  # fmt: skip
        run.parent_id = parent.id
        run.max_depth = max(run.max_depth, 1)
        run.workflow = Workflow(
            reasoning=f"Follow-up of run {parent.id}: the conductor reviews it with the caller's feedback.",
            steps=[*parent.workflow.steps, continuation_step(parent, feedback)],
        )
        run.steps = [
            step.model_copy(update={"inherited_from": parent.inherited_origin(step)})
            for step in parent.steps if step.status == "done"
        ]  # fmt: skip
        for seq, step in enumerate(run.steps):
            self.store.save_step(run.id, seq, step, None)
        self._launch(run, pool)
        return run

    async def run_planned(self, run_id: str, on_event: ProgressCallback | None = None) -> Run:
        """Execute a stored plan (a run in status `planned`) on the pool it was planned for."""
        status = self.status(run_id).status
        if status != "planned":
            raise RequestError(f"run_id: run {run_id} is {status}, not planned")
        run = self.continue_run(run_id)
        return await self.wait(run.id, None, on_event)

    async def wait(
        self,
        run_id: str,
        timeout_s: float | None,
        on_event: ProgressCallback | None = None,
        heartbeat_s: float | None = None,
    ) -> Run:
        """Wait up to `timeout_s` (None: to the end) for a run, relaying its progress to `on_event`.

        Past the timeout the run goes on in the background and comes back with status `running`. If the
        waiting caller is cancelled, the run is cancelled too (its finished steps are kept).
        """
        if run_id not in self._active:
            return self.status(run_id)
        run, task = self._active[run_id]
        queue: asyncio.Queue[ProgressEvent] = asyncio.Queue()
        self._listeners[run_id].append(queue.put)
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        try:
            while not task.done():
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                pause = min(x for x in (remaining, heartbeat_s, 3600.0) if x is not None)
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task}, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    await emit(on_event, getter.result())
                    continue
                getter.cancel()
                if getter.done() and not getter.cancelled():  # it got an event as the wait timed out
                    await emit(on_event, getter.result())
                if not done and heartbeat_s is not None:
                    finished = sum(1 for s in run.steps if s.status == "done")
                    await emit(
                        on_event,
                        ProgressEvent(
                            "heartbeat",
                            run_id,
                            f"still running: {finished}/{len(run.steps)} steps done",
                            finished_steps=finished,
                            total_steps=len(run.steps),
                        ),
                    )
        except asyncio.CancelledError:
            await self.cancel(run_id)
            raise
        finally:
            self._listeners[run_id].remove(queue.put)
            if not self._listeners[run_id] and run_id not in self._active:
                del self._listeners[run_id]  # nothing is kept per finished run
        while not queue.empty():
            await emit(on_event, queue.get_nowait())
        return run

    async def cancel(self, run_id: str) -> None:
        """Cancel a run executing here and wait (shielded) until its cancellation is recorded."""
        entry = self._active.get(run_id)
        if entry is None:
            return
        entry[1].cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({entry[1]}, timeout=10)

    async def close(self) -> None:
        """Stop: runs still executing are recorded as interrupted, to be resumed by any later process."""
        self._closing = True
        for run_id in list(self._active):
            await self.cancel(run_id)
        self.lease.close()

    def _launch(self, run: Run, pool: Pool) -> None:
        run.status, run.owner = "running", self.lease.token
        run.started_at = run.started_at or now()
        self.store.save_run(run)

        async def relay(event: ProgressEvent) -> None:
            for listener in list(self._listeners.get(run.id, ())):
                await listener(event)

        task = asyncio.get_running_loop().create_task(self._execute(run, pool, relay), name=f"run-{run.id}")
        self._active[run.id] = (run, task)
        task.add_done_callback(lambda _: self._forget(run.id))

    def _forget(self, run_id: str) -> None:
        self._active.pop(run_id, None)
        if not self._listeners.get(run_id):
            self._listeners.pop(run_id, None)

    async def _execute(self, run: Run, pool: Pool, on_event: ProgressCallback) -> Run:
        log.info("run_started", run_id=run.id, pool=pool.name)
        try:
            if run.workflow is None:
                await self._conduct(run, pool, on_event)
            executor = Executor(pool, self.store, on_event, self.settings.step_timeout_s, self.server_budget)
            await executor.execute(run)
        except asyncio.CancelledError:
            if self._closing:
                run.status, run.error = "interrupted", "the server stopped; continue_workflow resumes it"
            else:
                run.status, run.error = "cancelled", "cancelled by the caller"
            raise
        except Exception as exc:  # an engine bug must still leave a readable, finished record
            log.exception("run_crashed", run_id=run.id)
            run.status, run.error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            run.ended_at = now()
            run.recompute_totals()
            self.store.save_run(run)
            log.info(
                "run_finished",
                run_id=run.id,
                status=run.status,
                tokens=run.totals.total_tokens,
                cost_usd=run.totals.cost_usd,
            )
            await emit(
                on_event,
                ProgressEvent(
                    "run_finished",
                    run.id,
                    f"run {run.status}",
                    finished_steps=run.totals.steps,
                    total_steps=len(run.steps),
                ),
            )
        return run

    def status(self, run_id: str) -> Run:
        """The run as it stands now; a `running` run whose process died is marked `interrupted` here."""
        if run_id in self._active:
            return self._active[run_id][0]
        run = self.store.load_run(run_id)
        if run.status == "running" and not self.lease.is_alive(run.owner):
            run.status, run.error = "interrupted", "the process running it stopped; continue_workflow resumes it"
            for step in run.steps:
                if step.status == "running":
                    step.status, step.error = "cancelled", "interrupted"
                    self.store.save_step(run.id, step.index, step, None)
            self.store.save_run(run)
        return run

    def list_runs(self, limit: int = 20, status: str | None = None) -> list[dict[str, Any]]:
        if not 1 <= limit <= 1000:
            raise RequestError(f"limit: must be between 1 and 1000, got {limit}")
        rows = self.store.list_runs(limit, status)
        for row in rows:
            if row["status"] == "running":
                row["status"] = self.status(row["id"]).status
        return rows
