"""The service: one lifespan that owns every run it starts. Plan, start, follow, continue and cancel runs.

`async with Service.open(settings) as service:` opens the store, takes this process's lease and (PostgreSQL) joins the
replicas' progress bus; every run task and watcher it starts is owned by its TaskOwner, and leaving the block cancels
and awaits them all (runs still executing are recorded as interrupted, for a later process to resume). Requests arrive
validated (`RunRequest`); every change of a run is stored before the caller hears of it, so nothing computed is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING

import anyio

from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.config import Settings
from conductor_mcp.core.client_tools import add_tool_turn
from conductor_mcp.core.events import ProgressCallback, ProgressEvent
from conductor_mcp.core.host_model import HostModel
from conductor_mcp.core.limits import CANCEL_GRACE_S, MAX_CONTEXT_CHARS
from conductor_mcp.core.new_run import new_run
from conductor_mcp.core.outcome import END_KINDS, EndStatus, Stop
from conductor_mcp.core.pool import CONDUCTOR_ID, Pool
from conductor_mcp.core.prompts import continuation_step, follow_up_context
from conductor_mcp.core.records import Run, ToolResult, now
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.trace_context import TraceContext
from conductor_mcp.core.usage import CostEstimate, ServerBudget
from conductor_mcp.core.workflow import Workflow, given_workflow
from conductor_mcp.engine.conductor import Conductor
from conductor_mcp.engine.cost import estimate_cost
from conductor_mcp.engine.executor import Executor, StepCrashed
from conductor_mcp.engine.progress import emit
from conductor_mcp.engine.workspace_steps import open_workspaces, workspace_steps
from conductor_mcp.errors import BudgetExhausted, RequestError, StoreError
from conductor_mcp.models.local import LocalServers
from conductor_mcp.models.providers import Providers
from conductor_mcp.runs.active import ActiveRuns
from conductor_mcp.runs.backends import open_lease, open_progress_bus, open_store
from conductor_mcp.runs.cancels import ask_to_cancel, serve_cancel_requests
from conductor_mcp.runs.leases import Lease
from conductor_mcp.runs.reclaim import Reclaimer
from conductor_mcp.runs.store import Store
from conductor_mcp.runtime.lifetimes import TaskOwner
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.service.reader import RunReader
from conductor_mcp.telemetry.observer import Telemetry

if TYPE_CHECKING:
    from conductor_mcp.runs.postgres_live import ProgressBus

log = get_logger(__name__)


class Service(RunReader):
    """Runs executing in this process, and everything a door may do with a run. Made by `Service.open`."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        lease: Lease,
        owner: TaskOwner,
        bus: ProgressBus | None,
        local_servers: LocalServers | None = None,
    ) -> None:
        super().__init__(settings, store, lease)
        self.workspaces: Workspaces | None = None  # every agent workspace of every run (Service.open opens it)
        self._lease = lease
        self._owner = owner
        self._bus = bus  # replicas sharing PostgreSQL: progress of runs executing elsewhere
        self.telemetry = Telemetry(settings, store, lease)  # metrics, and traces when an OTLP endpoint is set
        self._active = ActiveRuns(owner, bus.publish if bus else None, self.telemetry.watch)
        self.providers = Providers(settings, local_servers)
        self.conductor = Conductor(self.providers)
        self.server_budget = ServerBudget(max_tokens=settings.server_max_tokens, max_usd=settings.server_max_usd)
        self._unsaved: dict[str, Run] = {}  # runs whose last state could not be written (a full disk, say)
        self._closing = False
        self.after_warm_up: Callable[[], None] | None = None  # what its process does once the backends are loaded

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, settings: Settings | None = None, store: Store | None = None, local_servers: LocalServers | None = None
    ) -> AsyncIterator[Service]:
        """The service's lifespan: store (unless given), lease and bus opened here, and everything closed on exit;
        `local_servers`: the embedded models' servers, some maybe started already (it stops the ones it started)."""
        settings = settings or Settings.from_env()
        opened = store is None
        store = store or open_store(settings)
        owner = TaskOwner()
        stack = contextlib.AsyncExitStack()  # closed last: the runs using the workspaces have ended by then
        try:
            lease = open_lease(settings.state_dir, store)
            try:
                service = cls(settings, store, lease, owner, open_progress_bus(store, owner), local_servers)
                lease.when_regained(Reclaimer(store, service._active, lease.token, asyncio.get_running_loop()))
                service.workspaces = await stack.enter_async_context(open_workspaces(settings))
                owner.spawn(serve_cancel_requests(store, service._active, service.get_run), name="cancel-requests")
                try:
                    yield service
                finally:
                    with anyio.CancelScope(shield=True):
                        await service._shut_down()
            finally:
                lease.close()
        finally:
            await stack.aclose()
            if opened:
                store.close()

    async def _shut_down(self) -> None:
        """Stop: runs still executing are recorded as interrupted, to be resumed by any later process."""
        self._closing = True
        await self._owner.close()
        if self._bus is not None:
            await self._bus.close()
        await anyio.to_thread.run_sync(self.telemetry.close)  # the spans of the runs just interrupted, sent
        await self.providers.aclose()

    def warm_up(self) -> None:
        """Load the model backends the pools name in the background, then call `after_warm_up`: a door calls this
        after its client's handshake, which is answered without them, and the first run finds them loaded."""
        if not self._closing and not self.providers.warm_started:
            self._owner.spawn(self.providers.warm(self.pools.models, self.after_warm_up), name="warm-backends")

    # -- starting runs ----------------------------------------------------------------------------
    def _new_run(self, request: RunRequest, sampling: bool = False) -> tuple[Run, Pool]:
        exhausted = self.server_budget.exhausted()
        if exhausted:
            raise BudgetExhausted(f"server: {exhausted}; no new runs until the server restarts")
        pool = self.pools.for_request(request.pool)
        return new_run(request, pool, self.pools.digest(pool), sampling)

    async def plan(self, request: RunRequest, on_event: ProgressCallback | None = None, sampling: bool = False) -> Run:
        """The conductor's workflow, stored as a `planned` run; no worker is called (`sampling`: see `start`)."""
        run, pool = self._new_run(request, sampling)
        self._store.save_run(run)
        await self.conductor.plan_run(run, pool, self.server_budget, on_event)
        run.recompute_totals()
        self._store.save_run(run)
        return run

    def estimate(self, run: Run) -> CostEstimate:
        """What running a planned run's workflow may cost, on the pool it was planned for."""
        if run.workflow is None:
            raise RequestError(f"run_id: run {run.id} has no workflow to estimate")
        return estimate_cost(run.workflow, self.run_pool(run), run.task, run.context)

    async def orchestrate(self, request: RunRequest, on_event: ProgressCallback | None = None) -> Run:
        """Plan and run to the end; returns the finished (or failed) run. Cancelling the caller cancels the run."""
        run = self.start(request)
        return await self.wait(run.id, None, on_event, cancel_on_exit=True)

    def start(self, request: RunRequest, workflow: Workflow | None = None, host: HostModel | None = None) -> Run:
        """Store and start a run in the background; `wait` collects it. With `workflow` the conductor is not
        asked (baselines, replays); `host` (the caller's MCP session) answers `model: host` workers."""
        run, pool = self._new_run(request, host is not None)
        if workflow is not None:
            run.workflow = given_workflow(workflow, [*pool.visible_ids(), CONDUCTOR_ID])
        self._launch(run, pool, host)
        return run

    # -- continuing runs --------------------------------------------------------------------------
    def executes_here(self, run_id: str) -> bool:
        """Whether this process runs it now (a caller collecting it did not start it, so leaving cancels nothing)."""
        return run_id in self._active

    def continue_run(
        self, run_id: str, feedback: str | None = None, host: HostModel | None = None, trace: TraceContext | None = None
    ) -> Run:
        """Collect, resume or follow up a run; returns the run to `wait` on (a new one when there is feedback).

        - running here or in another process (either store): that run, which `wait` follows to its end;
        - planned: its stored plan starts;
        - interrupted, failed or cancelled: it resumes; finished steps are kept and not called again;
        - with feedback (any run not running): a follow-up run (see `_follow_up`) that links to its parent, its
          trace a child of the caller's `trace` when one is given (a resumed run keeps the trace it had).
        """
        active = self._active.get(run_id)
        if active is not None:
            if feedback:
                raise RequestError(f"feedback: run {run_id} is still running; collect it before giving feedback")
            return active
        self._flush_unsaved(run_id)
        run = self.reconcile(run_id)
        if run.status == "running":
            if feedback is not None:
                raise RequestError(f"feedback: run {run_id} is still running; collect it before giving feedback")
            return run
        if feedback is not None:
            return self._follow_up(run, feedback, host, trace)
        if run.status == "done":
            return run
        return self._resume(run, host=host)

    def answer_tool_calls(self, run_id: str, results: list[ToolResult]) -> Run:
        """Go on with a run whose final worker called the client's tools: the same worker gets its conversation
        and the client's results, as a new step of the same run (see core/client_tools.py); returns the run."""
        if run_id in self._active:
            raise RequestError(f"run_id: run {run_id} is still running; collect it before sending tool results")
        run = self.reconcile(run_id)  # a turn refused by add_tool_turn rolls the claim back with it
        return self._resume(run, lambda claimed: add_tool_turn(claimed, results))

    def _resume(self, run: Run, change: Callable[[Run], list[int]] | None = None, host: HostModel | None = None) -> Run:
        """Claim a stored run (applying `change` in the same transaction) and execute what is left of it."""
        pool = self.run_pool(run)
        claimed = self._claim(run.id, change)
        self._active.launch(claimed, lambda relay: self._execute(claimed, pool, relay, self.providers.hosted(host)))
        return claimed

    def _claim(self, run_id: str, change: Callable[[Run], list[int]] | None = None) -> Run:
        """Make this process the run's owner, atomically: of two processes resuming one run, exactly one wins."""

        def take(run: Run) -> list[int] | None:
            if run.status == "running" and not self._orphaned(run):
                return None
            run.status, run.owner, run.error, run.stop = "running", self._lease.token, None, None
            run.started_at = run.started_at or now()
            return change(run) if change is not None else []

        run = self._store.update(run_id, take)
        if run.owner != self._lease.token or run.status != "running":
            raise RequestError(f"run_id: run {run_id} is running in another server process")
        self._store.clear_cancel(run_id)  # a cancel asked for before it was interrupted is not for this execution
        return run

    def _flush_unsaved(self, run_id: str) -> None:
        """Write what a run did while the store could not be written (steps that finished meanwhile), now that
        it can; unless another process has taken the run over since, whose record then stands."""
        unsaved = self._unsaved.get(run_id)
        if unsaved is None:
            return

        def write_back(stored: Run) -> list[int] | None:
            if stored.owner != self._lease.token:
                return None
            for name in Run.model_fields:
                setattr(stored, name, getattr(unsaved, name))
            return list(range(len(stored.steps)))

        self._store.update(run_id, write_back)
        del self._unsaved[run_id]

    def _follow_up(self, parent: Run, feedback: str, host: HostModel | None, trace: TraceContext | None) -> Run:
        """A child run: the parent's finished steps, taken over as they are, then the conductor as a worker
        who sees them all and the caller's feedback, and writes a corrective workflow or stops."""
        if not feedback.strip():
            raise RequestError("feedback: must not be empty when given")
        if parent.workflow is None or not parent.workflow.steps:
            raise RequestError(f"run_id: run {parent.id} has no workflow to follow up; orchestrate the task again")
        context = follow_up_context(parent.context, feedback)[-MAX_CONTEXT_CHARS:]
        request = parent.request().but(context=context, self_correct=False, trace=trace)
        run, pool = self._new_run(request, host is not None)
        run.follow(parent, continuation_step(parent.workflow, feedback))
        # The run's row, then its steps (PostgreSQL holds a step to a run row that exists); SQLite: one commit.
        self._store.save_steps(run.id, list(enumerate(run.steps)), run)
        self._launch(run, pool, host)
        return run

    async def run_planned(self, run_id: str, on_event: ProgressCallback | None = None) -> Run:
        """Execute a stored plan (a run in status `planned`) on the pool it was planned for."""
        status = self.get_run(run_id).status
        if status != "planned":
            raise RequestError(f"run_id: run {run_id} is {status}, not planned")
        run = self.continue_run(run_id)
        return await self.wait(run.id, None, on_event, cancel_on_exit=True)

    # -- following and cancelling -----------------------------------------------------------------
    def follow(
        self, run_id: str, heartbeat_s: float | None = None, coalesce: bool = False
    ) -> AsyncGenerator[ProgressEvent, None]:
        """The run's progress from now until it stops running, wherever it executes: here (its own events), on
        a replica sharing PostgreSQL (NOTIFY), or in another process on the same SQLite file (the store). The
        source's own stream, handed over as it is (not relayed again)."""
        if run_id in self._active:
            return self._active.events(run_id, heartbeat_s, coalesce)
        if self._bus is not None:
            return self._bus.events(run_id, lambda: self.get_run(run_id), heartbeat_s)
        return super().follow(run_id, heartbeat_s, coalesce)

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
        """As RunReader.wait; if the waiting caller is cancelled, the run is cancelled too (its finished steps are
        kept) only with `cancel_on_exit`, which the caller that started the run passes; others just stop waiting."""
        executing = self._active.get(run_id)  # an execution here: its record is what it stores, change by change
        try:
            await relay_until(self.follow(run_id, heartbeat_s, coalesce), timeout_s, on_event)
        except asyncio.CancelledError:
            if cancel_on_exit:
                with anyio.CancelScope(shield=True):
                    await self.cancel(run_id)
            raise
        if executing is None or run_id in self._active or self._store.given_up(run_id):
            return self.get_run(run_id)  # as stored: here, or where another replica took it over (runs/reclaim.py)
        return executing  # it ended here, and its last write was this record: not read back and built again

    async def cancel(self, run_id: str, wait_s: float = CANCEL_GRACE_S) -> Run:
        """Cancel a run wherever it executes, keeping its finished steps; a run that has ended stays as it is.

        Here: its task is cancelled and its cancellation recorded before this returns. Elsewhere: the request goes
        through the store to the process that owns it (runs/cancels.py), and this waits up to `wait_s` for it."""
        if await self._active.cancel(run_id):
            return self.get_run(run_id)
        run = self.get_run(run_id)
        if run.status != "running":
            return run
        return await ask_to_cancel(self._store, lambda: self.get_run(run_id), wait_s)

    # -- executing runs ---------------------------------------------------------------------------
    def _launch(self, run: Run, pool: Pool, host: HostModel | None = None) -> None:
        run.status, run.owner = "running", self._lease.token
        run.started_at = run.started_at or now()
        self._store.save_run(run)
        self._active.launch(run, lambda relay: self._execute(run, pool, relay, self.providers.hosted(host)))

    async def _execute(self, run: Run, pool: Pool, on_event: ProgressCallback, providers: Providers) -> Run:
        log.info("run_started", run_id=run.id, pool=pool.name)
        try:
            if run.workflow is None:  # the plan is stored with its pending steps, in the executor's first write
                await self.conductor.plan_run(run, pool, self.server_budget, on_event)
            async with workspace_steps(self.workspaces, run, pool, providers, self.settings) as steps:
                timeout = self.settings.step_timeout_s
                executor = Executor(pool, self._store, providers, on_event, timeout, self.server_budget, steps)
                await executor.execute(run)
        except asyncio.CancelledError:
            if self._closing:
                self._end(run, "interrupted", "the server stopped; continue_workflow resumes it")
            else:
                self._end(run, "cancelled", "cancelled by the caller")
            raise
        except StoreError as exc:  # the run stops: going on would pay for calls whose results cannot be kept
            log.error("run_store_failed", run_id=run.id, error=str(exc))
            self._end(run, "interrupted", str(exc))
            self._unsaved[run.id] = run  # what the store missed is written by continue_run
        except Exception as exc:  # a bug must still leave a readable, finished record naming it
            log.exception("run_crashed", run_id=run.id)
            crash = exc.__cause__ if isinstance(exc, StepCrashed) and exc.__cause__ else exc
            step = exc.key if isinstance(exc, StepCrashed) else None
            where = f" in step {step}" if step else ""
            detail = f"internal error{where}: {type(crash).__name__}: {crash}"
            self._end(run, "failed", detail, Stop(kind="internal_error", detail=detail, step=step))
        finally:
            await self._finish(run, on_event)
        return run

    def _end(self, run: Run, status: EndStatus, detail: str, stop: Stop | None = None) -> None:
        """Record how a run ended other than by the engine's own outcome: the best answer so far is kept."""
        run.status, run.error = status, detail
        run.stop = stop or Stop(kind=END_KINDS[status], detail=detail)
        run.answer = run.answer or run.best_answer()

    async def _finish(self, run: Run, on_event: ProgressCallback) -> None:
        run.ended_at = now()
        run.recompute_totals()
        self._save_final(run)
        log.info(
            "run_finished",
            run_id=run.id,
            status=run.status,
            tokens=run.totals.total_tokens,
            cost_usd=run.totals.cost_usd,
        )
        finished = ProgressEvent("run_finished", run.id, f"run {run.status}", None, run.totals.steps, len(run.steps))
        await emit(on_event, finished)

    def _save_final(self, run: Run) -> None:
        """Record how the run ended; if the store cannot take it, keep the run here for `continue_run` to write."""
        try:
            self._store.save_run(run)
        except StoreError as exc:
            log.error("run_store_failed", run_id=run.id, error=str(exc))
            if run.status != "interrupted":
                self._end(run, "interrupted", str(exc))
            self._unsaved[run.id] = run

    # -- reading runs -----------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run:
        """The run as it stands now (read only): a `running` run whose process died reads as interrupted."""
        active = self._active.get(run_id) or self._unsaved.get(run_id)
        return active if active is not None else super().get_run(run_id)

    def reconcile(self, run_id: str) -> Run:
        """Record a run whose process died as interrupted (its running steps as cancelled); return the run. The
        check is repeated inside the store's transaction, so a run another process has just claimed is left alone."""
        run = self._store.load_run(run_id)
        if self._orphaned(run):
            run = self._store.update(run_id, lambda fresh: fresh.mark_interrupted() if self._orphaned(fresh) else None)
        return run

    def _orphaned(self, run: Run) -> bool:
        """A `running` run that no live process executes: its owner died, or it is ours but no longer active
        here (its last state could not be written, say)."""
        if run.status != "running" or run.id in self._active:
            return False
        return run.owner == self._lease.token or not self._lease.is_alive(run.owner)


async def relay_until(
    events: AsyncGenerator[ProgressEvent, None], timeout_s: float | None, on_event: ProgressCallback | None
) -> None:
    """Relay `events` to `on_event` until they end or `timeout_s` passes (then the events are closed)."""
    try:
        async with asyncio.timeout(timeout_s) as deadline, contextlib.aclosing(events) as following:
            async for event in following:
                await emit(on_event, event)
    except TimeoutError:
        if not deadline.expired():
            raise
