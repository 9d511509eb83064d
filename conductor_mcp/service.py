"""plan / orchestrate / run a stored plan / status: the operations every front end (CLI, MCP server) shares.

Arguments are validated here, once, with errors that name the field; every state change of a run is written
to the store before the caller hears of it, so nothing already computed is lost.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

from conductor_mcp.conductor import plan_workflow
from conductor_mcp.config import MAX_CONTEXT_CHARS, MAX_STEPS_LIMIT, MAX_TASK_CHARS, Settings
from conductor_mcp.executor import Executor, ProgressCallback, ProgressEvent, emit
from conductor_mcp.logs import get_logger
from conductor_mcp.pool import Pool, PoolError, available_pools, load_pool
from conductor_mcp.store import RunNotFound, Store
from conductor_mcp.transcript import Budget, Run, now

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
        self._pools: dict[str, Pool] = {}

    # -- pools ------------------------------------------------------------------------------------
    def pool(self, name: str | None = None) -> Pool:
        key = name or self.settings.default_pool
        if key not in self._pools:
            self._pools[key] = load_pool(key, list(self.settings.pool_dirs))
        return self._pools[key]

    def pools(self) -> list[PoolSummary]:
        """Every pool on the search path, each validated; a broken file is listed with its error."""
        summaries = []
        for name, path in available_pools(list(self.settings.pool_dirs)).items():
            try:
                pool = load_pool(str(path), [])
            except PoolError as exc:
                summaries.append(PoolSummary(name, str(path), [], None, "", error=str(exc)))
                continue
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
    ) -> tuple[Run, Pool]:
        if not isinstance(task, str) or not task.strip():
            raise RequestError("task: must be a non-empty string")
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
        )
        return run, pool

    async def _conduct(self, run: Run, pool: Pool, on_event: ProgressCallback | None) -> None:
        await emit(on_event, ProgressEvent("conductor_started", run.id, f"conductor {pool.conductor.model} planning"))
        plan = await plan_workflow(pool, run.task, run.context, run.max_steps, run.metadata)
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
    ) -> Run:
        """The conductor's workflow, stored as a `planned` run; no worker is called."""
        run, pool_ = self._new_run(task, pool, max_steps, context, metadata, budget)
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
    ) -> Run:
        """Plan and run; returns the finished (or failed) run. Cancellation is recorded, then re-raised."""
        run, pool_ = self._new_run(task, pool, max_steps, context, metadata, budget)
        return await self._execute(run, pool_, on_event, plan_first=True)

    async def run_planned(self, run_id: str, on_event: ProgressCallback | None = None) -> Run:
        """Execute a stored plan (a run in status `planned`) on the pool it was planned for."""
        run = self.store.load_run(run_id)
        if run.status != "planned":
            raise RequestError(f"run_id: run {run_id} is {run.status}, not planned")
        try:
            pool_ = self.pool(run.pool)
        except PoolError as exc:
            raise RequestError(f"pool: {exc}") from None
        if pool_.digest() != run.pool_digest:
            log.warning("pool_changed_since_plan", run_id=run_id, pool=run.pool)
        return await self._execute(run, pool_, on_event, plan_first=False)

    async def _execute(self, run: Run, pool: Pool, on_event: ProgressCallback | None, plan_first: bool) -> Run:
        run.status, run.started_at = "running", now()
        self.store.save_run(run)
        log.info("run_started", run_id=run.id, pool=pool.name)
        try:
            if plan_first:
                await self._conduct(run, pool, on_event)
            await Executor(pool, self.store, on_event, self.settings.step_timeout_s).execute(run)
        except asyncio.CancelledError:
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
                "run_finished", run.id, f"run {run.status}", finished_steps=run.totals.steps, total_steps=len(run.steps)
            ),
        )
        return run

    def status(self, run_id: str) -> Run:
        """The stored run as it stands now (a run in progress shows its finished steps)."""
        return self.store.load_run(run_id)

    def list_runs(self, limit: int = 20, status: str | None = None) -> list[dict[str, Any]]:
        if not 1 <= limit <= 1000:
            raise RequestError(f"limit: must be between 1 and 1000, got {limit}")
        return self.store.list_runs(limit, status)
