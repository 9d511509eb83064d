"""plan / orchestrate / continue / read runs: the operations every door (MCP, CLI, HTTP) shares.

Requests arrive validated (`RunRequest`); every state change of a run is written to the store before the
caller hears of it, so nothing already computed is lost.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

from conductor_mcp.config import Settings
from conductor_mcp.core.client_tools import add_tool_turn
from conductor_mcp.core.events import ProgressCallback, ProgressEvent, emit
from conductor_mcp.core.pool import CONDUCTOR_ID, Pool
from conductor_mcp.core.prompts import SELF_CHECK_INSTRUCTION, continuation_step, follow_up_context
from conductor_mcp.core.records import Run, ToolResult, now
from conductor_mcp.core.request import MAX_CONTEXT_CHARS, MAX_TASK_CHARS, RunRequest
from conductor_mcp.core.usage import ServerBudget
from conductor_mcp.core.workflow import Step, Workflow, given_workflow
from conductor_mcp.engine.conductor import Conductor
from conductor_mcp.engine.executor import Executor
from conductor_mcp.errors import BudgetExhausted, PoolError, RequestError, StoreError
from conductor_mcp.logs import get_logger
from conductor_mcp.models.providers import Providers
from conductor_mcp.pools import PoolSummary, available_pools, default_pool, load_pool, summarize
from conductor_mcp.runs.active import ActiveRuns
from conductor_mcp.runs.backends import open_lease, open_progress_bus, open_store
from conductor_mcp.runs.store import Store

log = get_logger(__name__)


def new_run_id() -> str:
    """Random, not sequential: one user's run ids tell nothing about another's."""
    return secrets.token_hex(8)


class Service:
    def __init__(self, settings: Settings | None = None, store: Store | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.store = store or open_store(self.settings)
        self.lease = open_lease(self.settings.state_dir, self.store)
        self.bus = open_progress_bus(self.store)  # replicas sharing PostgreSQL: progress of runs executing elsewhere
        self.providers = Providers(self.settings)
        self.conductor = Conductor(self.providers)
        self.active = ActiveRuns(self.bus.publish if self.bus else None)
        self.server_budget = ServerBudget(
            max_tokens=self.settings.server_max_tokens, max_usd=self.settings.server_max_usd
        )
        self._pools: dict[str, Pool] = {}
        self._digests: dict[str, tuple[Pool, str]] = {}  # pool name -> (the pool object, its digest)
        self._unsaved: dict[str, Run] = {}  # runs whose last state could not be written (a full disk, say)
        self._closing = False
        self._default_pool: str | None = None
        self.viewer_base: str | None = None  # the run viewer's address, while an HTTP server serves one

    def viewer_url(self, run_id: str) -> str | None:
        """Where a person can watch a run in the viewer, when one is being served."""
        return f"{self.viewer_base}runs/{run_id}" if self.viewer_base else None

    # -- pools ------------------------------------------------------------------------------------
    def default_pool_name(self) -> str:
        """CONDUCTOR_POOL, else the first pool whose API keys are all set, else the local pool."""
        if self._default_pool is None:
            self._default_pool = self.settings.pool or default_pool(list(self.settings.pool_dirs))
        return self._default_pool

    def pool(self, name: str | None = None) -> Pool:
        key = name or self.default_pool_name()
        if key not in self._pools:
            self._pools[key] = load_pool(key, list(self.settings.pool_dirs))
        return self._pools[key]

    def pool_digest(self, pool: Pool) -> str:
        """The pool's digest, computed once per pool object: a canonical dump and a hash, which every run needs."""
        cached = self._digests.get(pool.name)
        if cached is None or cached[0] is not pool:
            cached = self._digests[pool.name] = (pool, pool.digest())
        return cached[1]

    def register_pool(self, pool: Pool) -> None:
        """Make a pool built in code (a training sub-pool, say) available by its name."""
        self._pools[pool.name] = pool

    def pools(self) -> list[PoolSummary]:
        """Every pool on the search path, each validated; a broken file is listed with its error."""
        summaries = []
        for name, path in available_pools(list(self.settings.pool_dirs)).items():
            summary, pool = summarize(name, path)
            if pool is not None:
                self._pools.setdefault(name, pool)  # later lookups by name reuse what was just validated
            summaries.append(summary)
        return summaries

    # -- starting runs ----------------------------------------------------------------------------
    def _new_run(self, request: RunRequest) -> tuple[Run, Pool]:
        exhausted = self.server_budget.exhausted()
        if exhausted:
            raise BudgetExhausted(f"server: {exhausted}; no new runs until the server restarts")
        try:
            pool = self.pool(request.pool)
        except PoolError as exc:
            raise RequestError(f"pool: {exc}") from None
        steps = request.max_steps or pool.max_steps
        run = Run(
            id=new_run_id(),
            task=request.task,
            context=request.context or None,
            files=list(request.files),
            metadata=dict(request.metadata),
            tools=list(request.tools),
            pool=pool.name,
            pool_digest=self.pool_digest(pool),
            conductor_model=pool.conductor.model,
            max_steps=steps,
            budget=request.budget,
            self_correct=pool.self_correct if request.self_correct is None else request.self_correct,
            max_depth=pool.max_depth,
            max_calls=2 * steps,
        )
        return run, pool

    async def _conduct(self, run: Run, pool: Pool, on_event: ProgressCallback | None) -> None:
        await emit(on_event, ProgressEvent("conductor_started", run.id, f"conductor {pool.conductor.model} planning"))
        plan = await self.conductor.plan(pool, run.task, run.context, run.max_steps, run.metadata)
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

    async def plan(self, request: RunRequest, on_event: ProgressCallback | None = None) -> Run:
        """The conductor's workflow, stored as a `planned` run; no worker is called."""
        run, pool = self._new_run(request)
        self.store.save_run(run)
        await self._conduct(run, pool, on_event)
        run.recompute_totals()
        self.store.save_run(run)
        return run

    async def orchestrate(self, request: RunRequest, on_event: ProgressCallback | None = None) -> Run:
        """Plan and run to the end; returns the finished (or failed) run. Cancelling the caller cancels the run."""
        run = self.start(request)
        return await self.wait(run.id, None, on_event, cancel_on_exit=True)

    def start(self, request: RunRequest, workflow: Workflow | None = None) -> Run:
        """Store and start a run in the background; `wait` collects it.

        With `workflow` the conductor is not asked: that workflow runs as given (baselines, replays).
        """
        run, pool = self._new_run(request)
        if workflow is not None:
            run.workflow = given_workflow(workflow, [*pool.visible_ids(), CONDUCTOR_ID])
        self._launch(run, pool)
        return run

    # -- continuing runs --------------------------------------------------------------------------
    def continue_run(self, run_id: str, feedback: str | None = None) -> Run:
        """Collect, resume or follow up a run; returns the run to `wait` on (a new one when there is feedback).

        - running here: the same run, to collect; running on another replica (PostgreSQL): that run, which
          `wait` follows through the replicas' progress notifications;
        - planned: its stored plan starts;
        - interrupted, failed or cancelled: it resumes; finished steps are kept and not called again;
        - with feedback (any run not running): a follow-up run (see `_follow_up`) that links to its parent.
        """
        active = self.active.get(run_id)
        if active is not None:
            if feedback:
                raise RequestError(f"feedback: run {run_id} is still running; collect it before giving feedback")
            return active
        self._flush_unsaved(run_id)
        run = self.reconcile(run_id)
        if run.status == "running":
            if self.bus is None or feedback is not None:
                raise RequestError(f"run_id: run {run_id} is running in another server process")
            return run
        if feedback is not None:
            return self._follow_up(run, feedback)
        if run.status == "done":
            return run
        return self._resume(run)

    def answer_tool_calls(self, run_id: str, results: list[ToolResult]) -> Run:
        """Go on with a run whose final worker called the client's tools: the same worker gets its conversation
        and the client's results, as a new step of the same run (see core/client_tools.py); returns the run."""
        if run_id in self.active:
            raise RequestError(f"run_id: run {run_id} is still running; collect it before sending tool results")
        run = self.reconcile(run_id)  # a turn refused by add_tool_turn rolls the claim back with it
        return self._resume(run, lambda claimed: add_tool_turn(claimed, results))

    def _resume(self, run: Run, change: Callable[[Run], list[int]] | None = None) -> Run:
        """Claim a stored run (applying `change` in the same transaction) and execute what is left of it."""
        try:
            pool = self.pool(run.pool)
        except PoolError as exc:
            raise RequestError(f"pool: {exc}") from None
        if self.pool_digest(pool) != run.pool_digest:
            log.warning("pool_changed_since_run_started", run_id=run.id, pool=run.pool)
        claimed = self._claim(run.id, change)
        self.active.launch(claimed, lambda relay: self._execute(claimed, pool, relay))
        return claimed

    def _claim(self, run_id: str, change: Callable[[Run], list[int]] | None = None) -> Run:
        """Make this process the run's owner, atomically: of two processes resuming one run, exactly one wins."""

        def take(run: Run) -> list[int] | None:
            if run.status == "running" and not self._orphaned(run):
                return None
            run.status, run.owner, run.error = "running", self.lease.token, None
            run.started_at = run.started_at or now()
            return change(run) if change is not None else []

        run = self.store.update(run_id, take)
        if run.owner != self.lease.token or run.status != "running":
            raise RequestError(f"run_id: run {run_id} is running in another server process")
        return run

    def _flush_unsaved(self, run_id: str) -> None:
        """Write what a run did while the store could not be written (steps that finished meanwhile), now that
        it can; unless another process has taken the run over since, whose record then stands."""
        unsaved = self._unsaved.get(run_id)
        if unsaved is None:
            return

        def write_back(stored: Run) -> list[int] | None:
            if stored.owner != self.lease.token:
                return None
            for name in Run.model_fields:
                setattr(stored, name, getattr(unsaved, name))
            return list(range(len(stored.steps)))

        self.store.update(run_id, write_back)
        del self._unsaved[run_id]

    def _follow_up(self, parent: Run, feedback: str) -> Run:
        """A child run: the parent's finished steps, taken over as they are, then the conductor as a worker
        who sees them all and the caller's feedback, and writes a corrective workflow or stops."""
        if not feedback.strip():
            raise RequestError("feedback: must not be empty when given")
        if len(feedback) > MAX_TASK_CHARS:
            raise RequestError(f"feedback: {len(feedback)} characters exceeds the limit of {MAX_TASK_CHARS}")
        if parent.workflow is None or not parent.workflow.steps:
            raise RequestError(f"run_id: run {parent.id} has no workflow to follow up; orchestrate the task again")
        context = follow_up_context(parent.context, feedback)[-MAX_CONTEXT_CHARS:]
        run, pool = self._new_run(parent.request().but(context=context, self_correct=False))
        run.follow(parent, continuation_step(parent.workflow, feedback))
        for seq, step in enumerate(run.steps):
            self.store.save_step(run.id, seq, step, None)
        self._launch(run, pool)
        return run

    async def run_planned(self, run_id: str, on_event: ProgressCallback | None = None) -> Run:
        """Execute a stored plan (a run in status `planned`) on the pool it was planned for."""
        status = self.get_run(run_id).status
        if status != "planned":
            raise RequestError(f"run_id: run {run_id} is {status}, not planned")
        run = self.continue_run(run_id)
        return await self.wait(run.id, None, on_event, cancel_on_exit=True)

    # -- executing runs ---------------------------------------------------------------------------
    async def wait(
        self,
        run_id: str,
        timeout_s: float | None,
        on_event: ProgressCallback | None = None,
        heartbeat_s: float | None = None,
        *,
        cancel_on_exit: bool = False,
        coalesce: bool = False,
    ) -> Run:
        """Wait up to `timeout_s` (None: to the end) for a run, relaying its progress to `on_event`.

        Past the timeout the run goes on in the background and comes back with status `running`. If the
        waiting caller is cancelled, the run is cancelled too (its finished steps are kept) only with
        `cancel_on_exit`, which the caller that started the run passes; other waiters just stop waiting.
        `coalesce`: events that arrive together are relayed as one (a door that pays a wire message per event).
        """
        if run_id not in self.active:
            run = self.get_run(run_id)
            if self.bus is None or run.status != "running":
                return run
            return await self.bus.wait(run_id, lambda: self.get_run(run_id), timeout_s, on_event, heartbeat_s)
        return await self.active.wait(
            run_id, timeout_s, on_event, heartbeat_s, cancel_on_exit=cancel_on_exit, coalesce=coalesce
        )

    async def cancel(self, run_id: str) -> None:
        await self.active.cancel(run_id)

    async def close(self) -> None:
        """Stop: runs still executing are recorded as interrupted, to be resumed by any later process."""
        self._closing = True
        for run_id in self.active.ids():
            await self.active.cancel(run_id)
        if self.bus is not None:
            await self.bus.close()
        self.lease.close()

    def _launch(self, run: Run, pool: Pool) -> None:
        run.status, run.owner = "running", self.lease.token
        run.started_at = run.started_at or now()
        self.store.save_run(run)
        self.active.launch(run, lambda relay: self._execute(run, pool, relay))

    async def _execute(self, run: Run, pool: Pool, on_event: ProgressCallback) -> Run:
        log.info("run_started", run_id=run.id, pool=pool.name)
        try:
            if run.workflow is None:
                await self._conduct(run, pool, on_event)
            executor = Executor(
                pool, self.store, self.providers, on_event, self.settings.step_timeout_s, self.server_budget
            )
            await executor.execute(run)
        except asyncio.CancelledError:
            if self._closing:
                run.status, run.error = "interrupted", "the server stopped; continue_workflow resumes it"
            else:
                run.status, run.error = "cancelled", "cancelled by the caller"
            raise
        except StoreError as exc:  # the run stops: going on would pay for calls whose results cannot be kept
            log.error("run_store_failed", run_id=run.id, error=str(exc))
            run.status, run.error = "interrupted", str(exc)
            self._unsaved[run.id] = run  # what the store missed is written by continue_run
        except Exception as exc:  # an engine bug must still leave a readable, finished record
            log.exception("run_crashed", run_id=run.id)
            run.status, run.error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            run.ended_at = now()
            run.recompute_totals()
            self._save_final(run)
            log.info("run_finished", run_id=run.id, status=run.status, tokens=run.totals.total_tokens,
                     cost_usd=run.totals.cost_usd)  # fmt: skip
            finished = ProgressEvent(
                "run_finished", run.id, f"run {run.status}", None, run.totals.steps, len(run.steps)
            )
            await emit(on_event, finished)
        return run

    def _save_final(self, run: Run) -> None:
        """Record how the run ended; if the store cannot take it, keep the run here for `continue_run` to write."""
        try:
            self.store.save_run(run)
        except StoreError as exc:
            log.error("run_store_failed", run_id=run.id, error=str(exc))
            if run.status != "interrupted":
                run.status, run.error = "interrupted", str(exc)
            self._unsaved[run.id] = run

    # -- reading runs -----------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run:
        """The run as it stands now (read only): a `running` run whose process died reads as interrupted."""
        active = self.active.get(run_id) or self._unsaved.get(run_id)
        if active is not None:
            return active
        run = self.store.load_run(run_id)
        if self._orphaned(run):
            run.mark_interrupted()
        return run

    def reconcile(self, run_id: str) -> Run:
        """Record a run whose process died as interrupted (its running steps as cancelled); return the run.

        The check is repeated inside the store's transaction, so a run another process has just claimed is
        left alone."""
        run = self.store.load_run(run_id)
        if self._orphaned(run):
            run = self.store.update(run_id, lambda fresh: fresh.mark_interrupted() if self._orphaned(fresh) else None)
        return run

    def _orphaned(self, run: Run) -> bool:
        """A `running` run that no live process executes: its owner died, or it is ours but no longer active
        here (its last state could not be written, say)."""
        if run.status != "running" or run.id in self.active:
            return False
        return run.owner == self.lease.token or not self.lease.is_alive(run.owner)

    def list_runs(self, limit: int = 20, status: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        """Newest first; `filters` are the store's (pool, parent_id, before: a page's keyset cursor)."""
        if not 1 <= limit <= 1000:
            raise RequestError(f"limit: must be between 1 and 1000, got {limit}")
        rows = self.store.list_runs(limit, status, **filters)
        for row in rows:
            if row["status"] == "running":
                row["status"] = self.get_run(row["id"]).status
        return rows
