"""Runs a workflow: a DAG from the access lists, each step started the moment the steps it sees are done.

The paper ran steps strictly in sequence; a step here waits only for the steps in its access list, so a
fan-out takes the time of its slowest branch. A worker's messages hold the task (and caller's context), the
(instruction, answer) pairs of exactly the steps in its access list, in index order, and its own
instruction: nothing else. Each step's record is committed to the store when it starts and when it ends.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

from conductor_mcp.core import client_tools, prompts
from conductor_mcp.core.events import EventKind, ProgressCallback, ProgressEvent
from conductor_mcp.core.limits import MAX_SEEN_OUTPUT_CHARS
from conductor_mcp.core.outcome import Stop
from conductor_mcp.core.pool import CONDUCTOR_ID, Pool
from conductor_mcp.core.prompts import seen_output, worker_messages
from conductor_mcp.core.records import Run, StepRecord, messages_digest, now
from conductor_mcp.core.usage import ServerBudget
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.engine.conductor import Conductor
from conductor_mcp.engine.cost import estimated_tokens
from conductor_mcp.engine.progress import emit
from conductor_mcp.engine.workspace_steps import WorkspaceSteps
from conductor_mcp.errors import ProviderError, StoreError
from conductor_mcp.models.providers import Providers, price_per_token
from conductor_mcp.runs.store import Store
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

CALLED = ("running", "done", "failed", "cancelled")  # statuses of steps that made (or are making) a call


class StepCrashed(Exception):
    """A step raised something no step should (a bug, a pool that no longer resolves): its siblings were cancelled.
    Not a ConductorError: the service records the run as failed with an internal error naming the step."""

    def __init__(self, key: str, cause: BaseException) -> None:
        super().__init__(f"step {key}: {type(cause).__name__}: {cause}")
        self.key = key


class Executor:
    """Executes one run's workflow on its pool, recording and persisting every step (nested ones included)."""

    def __init__(
        self,
        pool: Pool,
        store: Store,
        providers: Providers,
        on_event: ProgressCallback | None = None,
        step_timeout_s: float = 600.0,
        server_budget: ServerBudget | None = None,
        workspace_steps: WorkspaceSteps | None = None,
    ) -> None:
        self.pool = pool
        self.store = store
        self.providers = providers
        self.conductor = Conductor(providers)
        self.on_event = on_event
        self.step_timeout_s = step_timeout_s
        self.server_budget = server_budget or ServerBudget()
        self.workspace_steps = workspace_steps  # agents and tool-using models (None: the pool has none)
        self._standing: dict[str, str] = {}  # conductor step key -> the answer that stands if it stops
        self._positions: dict[str, int] = {}  # step key -> position in run.steps (and its order in the store)
        self._capped: Stop | None = None  # a depth cap met on the way: the run still ends with an answer
        # Tallies kept as steps change, so no step counts over the whole run (a long chain was quadratic):
        self._calls: set[str] = set()  # keys of the steps whose calls count toward the run's call cap
        self._done = 0  # steps done, inherited ones included (what progress events report)
        self._in_flight: dict[str, tuple[int, float]] = {}  # started step key -> its call's estimate, until it is paid
        self._claims: dict[str, tuple[int, float]] = {}  # the same, held against the server's budget until charged

    async def execute(self, run: Run) -> None:
        """Run the workflow to the end, a limit, a failed step, or cancellation (re-raised); sets the run's outcome.

        A limit (a cap or a budget) ends the run `done` with the best answer so far when there is one; a step that
        failed for good ends it `failed`, with the best answer so far kept. A step that raised something no step
        should is StepCrashed, after its running siblings were cancelled."""
        if run.workflow is None or not run.workflow.steps:
            raise ValueError(f"run {run.id} has no workflow to execute")
        self._positions = {record.key: position for position, record in enumerate(run.steps)}
        self._calls = {r.key for r in run.steps if r.status in CALLED and _counts_as_call(r)}
        self._done = sum(1 for r in run.steps if r.status == "done")
        try:
            stop = await self._run_workflow(run, run.workflow, depth=0, parent=None)
            if stop is not None and stop.kind == "step_failed" and self._can_recover(run):
                stop = await self._recover(run, stop)
        finally:  # a cancelled or crashed step was never charged: its claim ends with the run
            for key in list(self._claims):
                self._settle(key)
        last = self._record(run, str(len(run.workflow.steps) - 1))
        if stop is None and (last is None or last.status != "done"):
            stop = Stop(kind="step_failed", detail="the last step did not finish")
        if stop is None:
            run.status, run.answer = "done", last.output if last is not None else None
            run.stop = self._capped or Stop(kind="done", detail="the workflow finished")
            return
        run.answer, run.stop = run.best_answer(), stop
        if stop.is_limit and run.answer is not None:
            run.status = "done"
        else:
            run.status, run.error = "failed", stop.detail

    def _can_recover(self, run: Run) -> bool:
        top = [r for r in run.steps if r.depth == 0]
        return (
            self.pool.recursion
            and run.max_depth >= 1
            and any(r.status == "failed" and not r.tool_results for r in top)  # a tool turn is the client's to retry
            and not any(r.recovery for r in top)
        )

    async def _recover(self, run: Run, failure: Stop) -> Stop | None:
        """A step failed for good: the conductor, as a worker, sees what finished and re-plans around it."""
        assert run.workflow is not None
        top = [r for r in run.steps if r.depth == 0]
        finished = {r.index: r.output or "" for r in top if r.status == "done"}
        instruction = prompts.recovery_instruction(failure.detail)
        step = Step(worker=CONDUCTOR_ID, instruction=instruction, access=sorted(finished))
        run.workflow.steps.append(step)  # stored with the step's record, by _prepare
        log.warning("replanning_after_failure", run_id=run.id, failure=failure.detail)
        (record,) = self._prepare(run, Workflow(steps=[step]), 0, None, first_index=len(run.workflow.steps) - 1)
        record.recovery = True
        messages = worker_messages(run.task, run.context, run.workflow, record.index, finished)
        stop = self._admit(run, record, messages)
        if stop:
            self._skip(run, [record], stop)
            return stop
        record = await self._run_step(run, run.workflow, record, messages, finished)
        if record.status == "done":
            return None
        if record.stop is not None:
            return record.stop
        detail = f"re-planning after a failed step did not finish: {record.error}"
        return Stop(kind="step_failed", detail=detail, step=record.key)

    # -- one (possibly nested) workflow ----------------------------------------------------------------
    def _record(self, run: Run, key: str) -> StepRecord | None:
        position = self._positions.get(key)
        return None if position is None else run.steps[position]

    def _save(self, run: Run, record: StepRecord, messages: list[dict[str, Any]] | None = None) -> None:
        self.store.save_step(run.id, self._positions[record.key], record, messages)

    def _prepare(
        self, run: Run, workflow: Workflow, depth: int, parent: str | None, first_index: int = 0
    ) -> list[StepRecord]:
        """This workflow's records: finished ones (from an earlier attempt or a parent run) are kept; the others are
        stored as pending, in one write; with the run's header for its top-level workflow, which holds the plan."""
        records, unfinished = [], []
        for i, step in enumerate(workflow.steps, start=first_index):
            key = f"{parent}.{i}" if parent else str(i)
            record = self._record(run, key)
            if record is None:
                record = StepRecord(
                    key=key,
                    index=i,
                    depth=depth,
                    parent=parent,
                    worker_id=step.worker,
                    visible_id=step.worker,
                    model="",
                    instruction=step.instruction,
                    access=list(step.access),
                )
                run.steps.append(record)
                self._positions[key] = len(run.steps) - 1
            if record.status != "done":
                if step.worker == CONDUCTOR_ID:
                    record.worker_id, record.model = CONDUCTOR_ID, self.pool.conductor.model
                else:
                    worker = self.pool.resolve(step.worker)
                    record.worker_id, record.model = worker.id, worker.model
                record.status, record.error = "pending", None
                self._calls.discard(record.key)
                unfinished.append((self._positions[record.key], record))
            records.append(record)
        self.store.save_steps(run.id, unfinished, run if parent is None else None)
        return records

    async def _run_workflow(self, run: Run, workflow: Workflow, depth: int, parent: str | None) -> Stop | None:
        """Run one workflow as a DAG of step tasks in one task group; returns what stopped it early, or None when
        every step finished. A step that raises (a StoreError, a bug) cancels its running siblings at once: going
        on would pay for calls whose results cannot be kept, or that nobody will read."""
        records = self._prepare(run, workflow, depth, parent)
        outputs = {r.index: r.output or "" for r in records if r.status == "done"}
        schedule = _Schedule(workflow, outputs)
        finished: asyncio.Queue[StepRecord] = asyncio.Queue()
        stop: Stop | None = None
        try:
            async with asyncio.TaskGroup() as steps:
                running = 0
                while schedule.pending or running:
                    if stop is None:
                        started, stop = self._start_ready(steps, run, workflow, records, outputs, schedule, finished)
                        running += started
                    if not running:
                        break
                    record = await finished.get()
                    running -= 1
                    if record.status == "done":
                        outputs[record.index] = record.output or ""
                        schedule.finished(record.index)
                    elif stop is None:
                        stop = _stop_of(record)
        except BaseExceptionGroup as group:  # a step raised: the group has cancelled its siblings
            crashed = Stop(kind="internal_error", detail="a step crashed")
            self._skip(run, [records[i] for i in schedule.pending], crashed)
            raise first_cause(group) from None
        except asyncio.CancelledError:
            self._skip(run, [records[i] for i in schedule.pending], Stop(kind="cancelled", detail="run cancelled"))
            raise
        unreached = stop or Stop(kind="step_failed", detail="not reached")
        self._skip(run, [records[i] for i in schedule.pending], unreached)
        return stop

    def _start_ready(
        self,
        steps: asyncio.TaskGroup,
        run: Run,
        workflow: Workflow,
        records: list[StepRecord],
        outputs: dict[int, str],
        schedule: _Schedule,
        finished: asyncio.Queue[StepRecord],
    ) -> tuple[int, Stop | None]:
        """Start every pending step whose inputs are done, unless a limit refuses its call: (started, that stop)."""
        started = 0
        while schedule.ready:
            i = schedule.ready[0]
            shown = {j: seen_output(outputs[j], records[j].work) for j in workflow.steps[i].access}
            messages = self._messages(run, workflow, records[i], shown)
            stop = self._admit(run, records[i], messages)
            if stop:
                return started, stop
            schedule.start(i)
            step = steps.create_task(self._run_step(run, workflow, records[i], messages, outputs), name=records[i].key)
            step.add_done_callback(
                lambda task: None if task.cancelled() or task.exception() else finished.put_nowait(task.result())
            )
            started += 1
        return started, None

    def _messages(
        self, run: Run, workflow: Workflow, record: StepRecord, outputs: dict[int, str]
    ) -> list[dict[str, Any]]:
        """What a step's worker receives: the task and the steps it sees; for a tool turn, the conversation of the
        step whose tool calls it answers, continued with the client's results."""
        if not record.tool_results:
            return worker_messages(run.task, run.context, workflow, record.index, outputs)
        previous = self._record(run, str(record.access[0]))
        earlier = self.store.step_messages(run.id, previous.key) if previous is not None else None
        if previous is None or earlier is None:
            raise StoreError(f"run {run.id}: the conversation of the step before tool turn {record.key} is not stored")
        return client_tools.turn_messages(earlier, previous, record)

    def _admit(self, run: Run, record: StepRecord, messages: list[dict[str, Any]]) -> Stop | None:
        """Claim the call of a step about to start, or the stop the run's call cap, token cap or USD cap (prompt size
        estimated) puts in its way. A claim holds from here, not from when the step's task first runs, and a call
        not yet paid counts at its estimate: the steps of a fan-out are started in one pass, and each must see the
        ones started before it, or together they pass a cap that each alone would not. The server's budget counts
        the claims of all its runs in flight (ServerBudget.claim), for the same reason.
        Tool turns do not count toward the call cap: it bounds the team's workflow, and the client drives them."""
        started = len(self._calls)
        if started >= run.max_calls:
            return Stop(kind="call_cap", detail=f"call budget reached: {started} of {run.max_calls} calls used")
        estimate, next_cost = 0, 0.0
        if run.budget.capped() or self.server_budget.capped():  # else nothing to add up
            estimate = estimated_tokens(messages)
            if run.budget.max_usd is not None or self.server_budget.max_usd is not None:  # a price lookup is slow
                price = price_per_token(self.pool.spec_of(record.visible_id))
                next_cost = estimate * price[0] if price else 0.0
            unpaid_tokens = sum(tokens for tokens, _ in self._in_flight.values())
            unpaid_usd = sum(usd for _, usd in self._in_flight.values())
            spent_tokens, spent_usd = run.spent()
            stop = run.budget.exceeded_by(
                (spent_tokens + unpaid_tokens, spent_usd + unpaid_usd), (estimate, next_cost)
            ) or self.server_budget.next_call_exceeds(estimate, next_cost)  # its claims include this run's
            if stop:
                return stop
        if _counts_as_call(record):
            self._calls.add(record.key)
        self._in_flight[record.key] = (estimate, next_cost)
        if self.server_budget.capped():
            self.server_budget.claim(estimate, next_cost)
            self._claims[record.key] = (estimate, next_cost)
        return None

    def _settle(self, key: str) -> None:
        """The server is charged a step's usage, or never will be: its claim on the server's budget ends."""
        claim = self._claims.pop(key, None)
        if claim is not None:
            self.server_budget.settle(*claim)

    def _skip(self, run: Run, records: list[StepRecord], why: Stop) -> None:
        for record in records:
            record.status, record.error = "skipped", why.detail
            record.stop = why if why.is_limit else None
            self._save(run, record)

    # -- one step --------------------------------------------------------------------------------------
    async def _run_step(
        self,
        run: Run,
        workflow: Workflow,
        record: StepRecord,
        messages: list[dict[str, Any]],
        outputs: dict[int, str],
    ) -> StepRecord:
        record.status, record.started_at = "running", now()
        record.messages_digest = messages_digest(messages)
        seen = workflow.steps[record.index].access
        record.truncated_inputs = [j for j in seen if len(outputs.get(j, "")) > MAX_SEEN_OUTPUT_CHARS]
        self._save(run, record, messages)
        log.debug(
            "step_started", run_id=run.id, step=record.key, worker=record.worker_id, digest=record.messages_digest
        )
        await self._emit("step_started", run, record)
        try:
            async with asyncio.timeout(self.step_timeout_s):
                if record.worker_id == CONDUCTOR_ID:
                    await self._recurse(run, workflow, record, outputs)
                else:
                    await self._call_worker(run, record, messages)
        except ProviderError as exc:
            record.status, record.error, record.attempts = "failed", str(exc), exc.attempts
        except TimeoutError:
            record.status, record.error = "failed", f"step timed out after {self.step_timeout_s}s"
        except asyncio.CancelledError:
            record.status, record.error, record.ended_at = "cancelled", "cancelled", now()
            self._save(run, record)
            raise
        except (StoreError, StepCrashed):
            raise  # nothing more can be recorded about this step; or a nested step crashed and was recorded
        except Exception as exc:  # a bug, or a pool that no longer resolves: the run stops, naming the step
            record.status, record.error, record.ended_at = "failed", f"internal error: {type(exc).__name__}", now()
            self._save(run, record)
            raise StepCrashed(record.key, exc) from exc
        record.ended_at = now()
        self.server_budget.add(record)
        self._settle(record.key)
        self._in_flight.pop(record.key, None)  # paid: its usage is in run.spent() now
        self._done += record.status == "done"
        self._save(run, record)
        log.debug("step_finished", run_id=run.id, step=record.key, status=record.status)
        await self._emit("step_finished", run, record)
        return record

    async def _call_worker(self, run: Run, record: StepRecord, messages: list[dict[str, Any]]) -> None:
        worker = self.pool.get(record.worker_id)
        if worker.needs_workspace():
            if self.workspace_steps is None:
                raise ProviderError(f"worker {worker.id!r} needs a workspace, and this server has none", [])
            await self.workspace_steps.run(run, record, messages)
            record.status = "done"
            return
        result = await self.providers.complete(
            worker,
            messages,
            label=worker.id,
            metadata=run.metadata,
            simulation=self.pool.simulation,
            fallbacks=[(f.id, f) for f in self.pool.fallbacks_of(worker)],
            tools=run.tools if client_tools.offers_tools(run, record) else None,
        )
        record.status, record.output, record.finish_reason = "done", result.text, result.finish_reason
        record.tool_calls = client_tools.tool_calls_of(run.id, record.index, result.tool_calls)
        record.answered_by, record.attempts = result.answered_by, result.attempts
        record.prompt_tokens, record.completion_tokens = result.prompt_tokens, result.completion_tokens
        record.cost_usd, record.latency_s = result.cost_usd, round(result.latency_s, 4)

    async def _recurse(self, run: Run, workflow: Workflow, record: StepRecord, outputs: dict[int, str]) -> None:
        """The conductor as a worker: a corrective workflow at depth + 1, or a stop (the current answer stands)."""
        step = workflow.steps[record.index]
        standing = _standing_answer(step.access, record.index, outputs) or self._standing.get(record.parent or "", "")
        self._standing[record.key] = standing  # what a nested conductor step inherits if it sees nothing
        if record.depth + 1 > run.max_depth:
            record.status, record.output = "done", standing
            record.finish_reason = f"depth cap ({run.max_depth}) reached: the current answer stands"
            record.stop = Stop(kind="depth_cap", detail=f"step {record.key}: {record.finish_reason}", step=record.key)
            self._capped = self._capped or record.stop
            return
        if record.workflow is None:  # on resume, a correction already written is run, not asked for again
            seen = [(workflow.steps[j].instruction, outputs[j]) for j in step.access]
            plan = await self.conductor.correct(
                self.pool, run.task, run.context, seen, step.instruction, run.max_steps, run.metadata
            )
            record.conductor_call = plan.calls[-1] if plan.calls else None
            record.attempts = [a for call in plan.calls for a in call.attempts]
            record.prompt_tokens = sum(c.prompt_tokens for c in plan.calls)
            record.completion_tokens = sum(c.completion_tokens for c in plan.calls)
            record.cost_usd = sum(c.cost_usd for c in plan.calls)
            record.latency_s = round(sum(c.latency_s for c in plan.calls), 4)
            record.answered_by = self.pool.conductor.model
            record.workflow = plan.workflow
            record.messages_digest = messages_digest(plan.messages)
            self._save(run, record, plan.messages)  # the conductor's own prompt, not a worker's
        self._in_flight.pop(record.key, None)  # paid: its nested steps see its usage, not its estimate
        if not record.workflow.steps:
            record.status, record.output = "done", standing
            record.finish_reason = "stop: the current answer stands"
            return
        stop = await self._run_workflow(run, record.workflow, record.depth + 1, record.key)
        last = self._record(run, f"{record.key}.{len(record.workflow.steps) - 1}")
        if stop is None and last is not None and last.status == "done":
            record.status, record.output, record.finish_reason = "done", last.output, "corrected"
        else:
            record.status = "failed"
            record.error = stop.detail if stop is not None else "the corrective workflow did not finish"
            record.stop = stop if stop is not None and stop.is_limit else None

    async def _emit(self, kind: EventKind, run: Run, record: StepRecord) -> None:
        if self.on_event is None:
            return
        verb = "started" if kind == "step_started" else record.status
        message = f"step {record.key} {verb}: {record.label()}"
        await emit(self.on_event, ProgressEvent(kind, run.id, message, record, self._done, len(run.steps)))


class _Schedule:
    """Which steps of one workflow are still to start, and which of those have their inputs: a step that finishes
    frees the steps that see it, so each step's inputs are looked at once, not on every finish (on a long chain
    that was quadratic in its steps)."""

    def __init__(self, workflow: Workflow, outputs: dict[int, str]) -> None:
        self.pending = dict.fromkeys(i for i in range(len(workflow.steps)) if i not in outputs)  # in index order
        self._unmet = {i: {j for j in workflow.steps[i].access if j not in outputs} for i in self.pending}
        self._seen_by: dict[int, list[int]] = {}
        for i, unmet in self._unmet.items():
            for j in unmet:
                self._seen_by.setdefault(j, []).append(i)
        self.ready = [i for i, unmet in self._unmet.items() if not unmet]  # in index order, as steps start

    def finished(self, index: int) -> None:
        """Step `index` is done: the steps that waited only for it are ready."""
        for i in self._seen_by.get(index, ()):
            unmet = self._unmet[i]
            unmet.discard(index)
            if not unmet:
                bisect.insort(self.ready, i)

    def start(self, index: int) -> None:
        self.ready.remove(index)
        del self.pending[index]


def _counts_as_call(record: StepRecord) -> bool:
    """Whether a started step counts toward the call cap: not one taken over from a parent run (paid for there),
    nor a tool turn (the cap bounds the team's workflow; the client drives tool turns)."""
    return record.inherited_from is None and not record.tool_results


def _stop_of(record: StepRecord) -> Stop:
    """What a step that did not finish means for its workflow: the limit that held it back, or a failure."""
    if record.stop is not None:
        return record.stop
    detail = f"step {record.key} ({record.worker_id}) failed: {record.error}"
    return Stop(kind="step_failed", detail=detail, step=record.key)


def _standing_answer(access: list[int], index: int, outputs: dict[int, str]) -> str:
    """The answer that stands if the conductor stops: the latest step it sees, else the step before it."""
    candidates = access or ([index - 1] if index > 0 else [])
    return outputs.get(max(candidates), "") if candidates else ""


def first_cause(group: BaseExceptionGroup) -> BaseException:
    """The error a task group gathered, unwrapped (nested groups from nested workflows included): a StoreError
    first, since the run must then stop as interrupted; the rest are logged."""
    leaves: list[BaseException] = []

    def collect(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                collect(inner)
        else:
            leaves.append(error)

    collect(group)
    leaves.sort(key=lambda error: not isinstance(error, StoreError))
    for other in leaves[1:]:
        log.error("step_error_also_raised", error=f"{type(other).__name__}: {other}")
    return leaves[0]
