"""Steps whose worker works in a workspace: an agent CLI (agents/runner.py), or a model given workspace tools
(agents/loop.py over agents/tools.py).

Each such step gets its own workspace in the run's scope (agents/owner.py): a copy of the caller's repository, or,
when it sees an earlier step that worked in a workspace, one that starts from that step's result (the latest such
step it sees), so a second agent builds on the first one's work. The step's record keeps what the worker did
(`StepWork`: the agent's record or the tool calls, its own diff, bounded, and the whole patch from the caller's tree
to its result, for `apply`, unless it is over the run's cap: then the files it changes summarise it). The worker
works within the disk budget (a watcher stops it once the workspaces are over). A failure (the CLI missing, a
non-zero exit, its deadline, a model that errs, a workspace that cannot be made) is retried once in a fresh
workspace (not the disk budget's: that would fill the disk again), then the worker's fallbacks are tried, each
failure kept in the step's attempts; when all fail the step fails with the last error (the stderr tail included).
The scope, and the workspaces in it, end with the run (`workspace_steps`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from conductor_mcp.agents.loop import tool_loop
from conductor_mcp.agents.owner import RunWorkspaces, Workspaces
from conductor_mcp.agents.runner import change_warning, run_agent
from conductor_mcp.agents.tools import WorkspaceTools
from conductor_mcp.agents.workspace import Workspace, root_holding
from conductor_mcp.config import Settings
from conductor_mcp.core.agent_records import AgentRecord, StepWork
from conductor_mcp.core.limits import DEADLINE_MARGIN_S, STDERR_IN_ERROR_CHARS
from conductor_mcp.core.pool import Pool, WorkerSpec
from conductor_mcp.core.records import Attempt, Run, StepRecord
from conductor_mcp.errors import AgentFailed, AgentUnavailable, DiskBudgetExceeded, ProviderError, WorkspaceError
from conductor_mcp.models.providers import Providers
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)


class WorkspaceSteps:
    """The workspace steps of one run: their workspaces (by step key) in the run's scope."""

    def __init__(
        self,
        scope: RunWorkspaces,
        source: Path,
        pool: Pool,
        providers: Providers,
        step_timeout_s: float,
        patch_max_bytes: int,
        bound: Path | None = None,
    ) -> None:
        self.scope, self.source, self.pool, self.providers = scope, source, pool, providers
        self.bound = bound  # the root that holds the source: nothing outside it is in a workspace
        self.deadline_s = max(1.0, step_timeout_s - DEADLINE_MARGIN_S)
        self.patch_max_bytes = patch_max_bytes  # the whole patch kept in the step for `apply`; a bigger one is not
        self._by_step: dict[str, Workspace] = {}
        self._origin: dict[str, Workspace] = {}  # workspace id -> the first workspace of its chain

    async def run(self, run: Run, record: StepRecord, messages: list[dict[str, Any]]) -> None:
        """Carry out the step (filling its record), or ProviderError with every attempt when none succeeded."""
        seen = builds_on(run, record)
        worker = self.pool.get(record.worker_id)
        attempts: list[Attempt] = []
        error = "no attempt made"
        for candidate in [worker, *self.pool.fallbacks_of(worker)]:
            tries = 2 if candidate.needs_workspace() else 1  # a model's retries happen inside the provider
            for _ in range(tries):
                started = time.perf_counter()
                try:
                    await self._attempt(run, record, candidate, messages, seen)
                except (AgentFailed, AgentUnavailable, WorkspaceError, ProviderError) as exc:
                    error = _described(exc)
                    attempts += getattr(exc, "attempts", None) or [_attempt(candidate, error, started)]
                    log.warning("workspace_step_attempt_failed", run_id=run.id, step=record.key, error=error)
                    if isinstance(exc, AgentUnavailable | ProviderError | DiskBudgetExceeded):
                        break  # trying it again here would not help
                    continue
                record.attempts = [*attempts, *(record.attempts or [_attempt(candidate, None, started)])]
                return
        raise ProviderError(error, attempts)

    async def _attempt(
        self, run: Run, record: StepRecord, worker: WorkerSpec, messages: list[dict[str, Any]], seen: list[StepRecord]
    ) -> None:
        record.attempts = []
        if not worker.needs_workspace():  # a plain model as a fallback: no failed attempt's workspace stands
            record.work = None
            self._by_step.pop(record.key, None)
            result = await self.providers.complete(
                worker, messages, label=worker.id, metadata=run.metadata, simulation=self.pool.simulation
            )
            record.output, record.finish_reason, record.attempts = result.text, result.finish_reason, result.attempts
            record.prompt_tokens, record.completion_tokens = result.prompt_tokens, result.completion_tokens
            record.cost_usd, record.latency_s = result.cost_usd, round(result.latency_s, 4)
            record.answered_by = result.answered_by
            return
        workspace = await self._workspace(record, seen)
        work = StepWork(base=workspace.base, origin=self._origin_of(workspace).base if workspace.base.parent else None)
        record.work = work
        try:
            async with self.scope.owner.agent_slot():
                if worker.agent is not None:
                    working = self._agent(record, worker, messages, workspace, work)
                else:
                    working = self._tools(run, record, worker, messages, workspace, work)
                await self.scope.owner.within_budget(working)
        except Exception:
            with contextlib.suppress(WorkspaceError):  # what it changed is kept even when it failed
                await self._keep_change(workspace, work)
            raise
        await self._keep_change(workspace, work)
        if work.agent is not None and work.diff is not None:
            work.agent.warning = change_warning(work.agent, bool(work.diff.files))
        record.answered_by = worker.model

    async def _agent(
        self,
        record: StepRecord,
        worker: WorkerSpec,
        messages: list[dict[str, Any]],
        workspace: Workspace,
        work: StepWork,
    ) -> None:
        prompt = "\n\n".join(str(m.get("content") or "") for m in messages)
        try:
            agent = await run_agent(worker, prompt, workspace, timeout_s=min(worker.timeout_s, self.deadline_s))
        except AgentFailed as exc:
            if isinstance(exc.record, AgentRecord):
                work.agent = exc.record
            raise
        work.agent = agent
        record.output, record.finish_reason = agent.final_message, f"agent exited with status {agent.exit_status}"
        record.prompt_tokens, record.completion_tokens = agent.prompt_tokens, agent.completion_tokens
        record.cost_usd, record.latency_s = agent.cost_usd, agent.latency_s

    async def _tools(
        self,
        run: Run,
        record: StepRecord,
        worker: WorkerSpec,
        messages: list[dict[str, Any]],
        workspace: Workspace,
        work: StepWork,
    ) -> None:
        complete = functools.partial(
            self.providers.complete, worker, label=worker.id, metadata=run.metadata, simulation=self.pool.simulation
        )
        started = time.perf_counter()
        tools = WorkspaceTools(workspace, worker.tools, worker.sandbox)
        result = await tool_loop(complete, messages, tools, max_turns=worker.max_tool_turns)
        work.tool_uses = result.uses
        record.output, record.finish_reason = result.answer, f"{result.ended} after {result.turns} turns"
        record.prompt_tokens, record.completion_tokens = result.prompt_tokens, result.completion_tokens
        record.cost_usd, record.latency_s = result.cost_usd, round(time.perf_counter() - started, 4)

    async def _workspace(self, record: StepRecord, seen: list[StepRecord]) -> Workspace:
        """A fresh workspace for the step: from the result of the latest seen step that worked in one (its workspace,
        or, when that is gone with an earlier process, its stored patch over the caller's tree), else from the
        caller's tree."""
        latest = max((r for r in seen if r.work is not None), key=lambda r: r.order, default=None)
        if latest is not None and latest.key in self._by_step:
            parent = self._by_step[latest.key]
            workspace = await self.scope.derive(parent)
            self._origin[workspace.id] = self._origin_of(parent)
        else:
            workspace = await self.scope.create(self.source, self.bound)
            self._origin[workspace.id] = workspace
            if latest is not None and latest.work is not None and latest.work.patch:
                await self._take_over(workspace, latest)
        self._by_step[record.key] = workspace
        return workspace

    async def _take_over(self, workspace: Workspace, earlier: StepRecord) -> None:
        assert earlier.work is not None and earlier.work.patch is not None
        patch, parent = earlier.work.patch.encode("utf-8"), earlier.work.base.id
        try:
            self._origin[workspace.id] = await asyncio.to_thread(workspace.take_over, patch, parent)
        except WorkspaceError as exc:  # the caller's tree moved on (the patch applied already, say)
            log.warning("earlier_result_not_taken_over", step=earlier.key, error=str(exc))

    def _origin_of(self, workspace: Workspace) -> Workspace:
        return self._origin.get(workspace.id, workspace)

    async def _keep_change(self, workspace: Workspace, work: StepWork) -> None:
        work.diff = await self.scope.diff(workspace)
        if not work.diff.files:
            return
        cap = self.patch_max_bytes
        patch, files = await asyncio.to_thread(workspace.patch_from, self._origin_of(workspace), cap)
        work.patch_files = files
        if patch is None:
            work.patch_note = (
                f"too large to keep: the patch is over the {cap} bytes a run keeps (CONDUCTOR_PATCH_MAX_MIB)"
            )
            return
        try:
            work.patch = patch.decode("utf-8")
        except UnicodeDecodeError:
            work.patch_note = "the patch holds text that is not UTF-8, which the run store cannot keep as it is"


def builds_on(run: Run, record: StepRecord) -> list[StepRecord]:
    """The steps whose results a step may build on: those it sees; for a step of a corrective workflow that sees
    none that worked in a workspace, those its conductor step saw (so a follow-up's corrective agent starts from
    the earlier agents' work, not from the caller's tree)."""
    by_key = {step.key: step for step in run.steps}
    prefix = f"{record.parent}." if record.parent else ""
    seen = [by_key[key] for j in record.access if (key := f"{prefix}{j}") in by_key]
    if record.parent in by_key and not any(step.work is not None for step in seen):
        seen += builds_on(run, by_key[record.parent])
    return seen


def _described(exc: Exception) -> str:
    """A failure as the step's error: for an agent that ran, the end of what it wrote to stderr too."""
    record = getattr(exc, "record", None)
    tail = record.stderr_tail if isinstance(record, AgentRecord) else None
    return f"{exc}; stderr: {tail[-STDERR_IN_ERROR_CHARS:]}" if tail else str(exc)


def _attempt(worker: WorkerSpec, error: str | None, started: float) -> Attempt:
    latency = round(time.perf_counter() - started, 4)
    return Attempt(model=worker.model, worker=worker.id, ok=error is None, error=error, latency_s=latency)


def open_workspaces(settings: Settings) -> Workspaces:
    """The owner of every workspace the service makes (`async with` it for the service's life)."""
    budget = int(settings.workspace_disk_gib * 2**30)
    return Workspaces(
        settings.workspace_root,
        disk_budget_bytes=budget,
        max_agents=settings.max_agents,
        hidden=(settings.state_dir,),
    )


@contextlib.asynccontextmanager
async def workspace_steps(
    owner: Workspaces | None, run: Run, pool: Pool, providers: Providers, settings: Settings
) -> AsyncIterator[WorkspaceSteps | None]:
    """The run's workspace steps while it executes (None when its pool has no worker that needs a workspace); its
    workspaces are removed when it ends, unless the run asked to keep them. The repository is the run's
    `workspace`, else the operator's first root; a workspace holds no more of it than the root that holds it."""
    if owner is None or not any(worker.needs_workspace() for worker in pool.workers):
        yield None
        return
    source = Path(run.workspace) if run.workspace else settings.file_roots[0]
    bound = root_holding(source, settings.file_roots)
    async with owner.run(run.id, keep=run.keep_workspaces) as scope:
        patch_max_bytes = int(settings.patch_max_mib * 2**20)
        yield WorkspaceSteps(scope, source, pool, providers, settings.step_timeout_s, patch_max_bytes, bound)
