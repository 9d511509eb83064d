"""The engine end to end on real litellm calls: conductor fallback, DAG execution, isolation, budgets, costs."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor_mcp.config import Settings
from conductor_mcp.core import prompts
from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.pool import parse_pool
from conductor_mcp.core.records import Run
from conductor_mcp.core.usage import Budget, ServerBudget
from conductor_mcp.core.workflow import Step, parse_workflow, validate_workflow
from conductor_mcp.doors.render import to_markdown
from conductor_mcp.engine import conductor
from conductor_mcp.engine.cost import estimated_tokens
from conductor_mcp.engine.executor import Executor
from conductor_mcp.errors import RequestError, RunNotFound
from conductor_mcp.models import providers
from conductor_mcp.models.completion import completion_prompt
from conductor_mcp.models.providers import Providers
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.service.catalogue import load_pool
from conductor_mcp.service.reader import RunReader
from conductor_mcp.service.service import Service
from tests.conftest import (
    in_service,
    orchestrate,
    owned_task,
    plan,
    planned_run,
    scripted_pool,
    sim_pool_doc,
    slow_pool_doc,
    write_pool,
)

# ------------------------------------------------------------------------------------------- conductor


def test_system_prompt_is_byte_identical_across_tasks(service: Service) -> None:
    pool = service.pools.get("testpool")
    assert prompts.system_prompt(pool, 5) == prompts.system_prompt(service.pools.get("testpool"), 5)
    assert "- model_0: strongest at math" in prompts.system_prompt(pool, 5)


def test_compact_prompt_is_short_and_its_example_is_a_valid_workflow(service: Service) -> None:
    pool = service.pools.get("testpool")
    compact = pool.model_copy(update={"conductor": pool.conductor.model_copy(update={"prompt": "compact"})})
    full_text, compact_text = prompts.system_prompt(pool, 5), prompts.system_prompt(compact, 5)
    assert len(compact_text) < len(full_text) / 2
    assert "- model_0: strongest at math" in compact_text and "At most 5 steps" in compact_text
    example = compact_text.split("Example:\n", 1)[1]
    workflow, repairs = validate_workflow(parse_workflow(example), compact.offered_ids(), 5)
    assert workflow.steps[0].worker == "model_0" and not repairs


async def test_conductor_messages_put_the_stable_prefix_first(service: Service, monkeypatch) -> None:
    seen: list[list[dict[str, Any]]] = []
    real = service.providers.complete

    async def spy(spec, messages, **kwargs):
        seen.append(messages)
        return await real(spec, messages, **kwargs)

    monkeypatch.setattr(service.providers, "complete", spy)
    await plan(service, "first task", pool="testpool")
    await plan(service, "a different, second task", pool="testpool")
    assert seen[0][0] == seen[1][0] and seen[0][0]["role"] == "system"
    assert seen[0][1]["content"].endswith("first task") and seen[1][1]["content"].endswith("second task")


def test_response_format_per_backend(service: Service) -> None:
    pool = service.pools.get("testpool")
    schema = {"type": "object"}
    spec = pool.conductor
    assert conductor.response_format(spec, schema)["json_schema"]["schema"] == schema
    assert conductor.response_format(spec.model_copy(update={"structured_output": "json_object"}), schema) == {
        "type": "json_object",
        "schema": schema,
    }
    assert conductor.response_format(spec.model_copy(update={"structured_output": "none"}), schema) is None


async def test_malformed_conductor_retries_once_with_the_error_then_succeeds(service: Service, monkeypatch) -> None:
    outputs = iter(
        [
            "I would use a strong model.",
            json.dumps({"reasoning": "ok", "steps": [{"worker": "model_1", "instruction": "solve", "access": []}]}),
        ]
    )
    retries: list[list[dict[str, Any]]] = []

    async def scripted(spec, messages, **kwargs):
        retries.append(messages)
        return providers.Completion(next(outputs), "stop", 10, 5, 0.0, 0.01, spec.model)

    monkeypatch.setattr(service.providers, "complete", scripted)
    run = await plan(service, "task", pool="testpool")
    assert len(run.conductor_calls) == 2 and run.fallback_reason is None
    assert "no workflow found" in retries[1][-1]["content"]
    assert retries[1][-2] == {"role": "assistant", "content": "I would use a strong model."}
    assert run.workflow.steps[0].worker == "model_1"


async def test_garbage_conductor_falls_back_to_default_worker(service: Service, pool_dir: Path) -> None:
    doc = sim_pool_doc(name="garbage", default_worker="beta")
    doc["conductor"] = {
        "model": "openai/broken",
        "params": {"mock_response": "model_id = [0"},
        "structured_output": "none",
    }
    write_pool(pool_dir, doc)
    run = await orchestrate(service, "task", pool="garbage", metadata={"domain": "code", "answer": "x"})
    assert run.status == "done"
    assert [c.raw_output for c in run.conductor_calls] == ["model_id = [0", "model_id = [0"]
    assert "not closed" in run.fallback_reason
    assert [s.worker_id for s in run.steps] == ["beta"]


async def test_conductor_outage_falls_back_and_records_attempts(service: Service, pool_dir: Path) -> None:
    doc = sim_pool_doc(name="down")
    doc["conductor"] = {
        "model": "openai/down",
        "params": {"mock_response": "litellm.InternalServerError"},
        "max_retries": 1,
    }
    write_pool(pool_dir, doc)
    run = await orchestrate(service, "task", pool="down")
    assert run.status == "done" and "conductor call failed" in run.fallback_reason
    assert len(run.conductor_calls) == 1 and len(run.conductor_calls[0].attempts) == 2


async def test_sim_conductor_repairs_are_recorded(service: Service, pool_dir: Path) -> None:
    doc = sim_pool_doc(name="flaky")
    doc["simulation"]["conductors"]["conductor"]["malformed_rate"] = 1.0
    write_pool(pool_dir, doc)
    outcomes = set()
    for i in range(30):
        run = await plan(service, f"hard task number {i}", pool="flaky", metadata={"difficulty": "hard"})
        assert run.workflow.steps
        outcomes.add(
            "fallback"
            if run.fallback_reason
            else "repaired"
            if run.repairs
            else "retried"
            if len(run.conductor_calls) > 1
            else "clean"
        )
    assert {"fallback", "repaired"} <= outcomes


# -------------------------------------------------------------------------------------------- executor

marker = st.integers(min_value=0, max_value=10**9)


@st.composite
def workflows(draw) -> list[tuple[str, str, Any]]:
    n = draw(st.integers(min_value=1, max_value=5))
    steps = []
    for i in range(n):
        access = draw(
            st.one_of(
                st.just("all"), st.lists(st.integers(min_value=0, max_value=i - 1), unique=True) if i else st.just([])
            )
        )
        worker = draw(st.sampled_from(["model_0", "model_1", "model_2"]))
        steps.append((worker, f"do-part-{i}-{draw(marker)}", access))
    return steps


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workflows())
def test_access_list_isolation(tmp_path: Path, steps: list[tuple[str, str, Any]]) -> None:
    """A worker's messages hold the task, exactly the steps in its access list (in order), and its instruction."""
    pool_dir = Path(tempfile.mkdtemp(dir=tmp_path))
    scripted_pool(pool_dir, "iso", steps)
    settings = Settings.from_env(state_dir=pool_dir / "state", pool_path=(pool_dir,))
    run = in_service(settings, lambda service: orchestrate(service, "the task", pool="iso", metadata={"answer": "1"}))
    assert run.status == "done"
    with RunReader.open(settings) as reader:
        sent = [reader.step_messages(run.id, str(i)) for i in range(len(steps))]
    for i, (_, _, access) in enumerate(steps):
        allowed = list(range(i)) if access == "all" else sorted(access)
        content = sent[i]
        assert len(content) == 1 and content[0]["role"] == "user"
        text = content[0]["content"]
        assert text.startswith("# Task\nthe task") and text.endswith(f"# Your instruction\n{steps[i][1]}")
        for j in range(len(steps)):
            if j != i:
                assert (steps[j][1] in text) == (j in allowed), (i, j, allowed)
        shown = [int(x) for x in re.findall(r"## Step (\d+): answer", text)]
        assert shown == allowed


async def test_fan_out_runs_in_parallel(service: Service, pool_dir: Path, monkeypatch) -> None:
    service.providers.sim_time_scale = 1
    doc_steps = [("model_0", f"solve {i}", []) for i in range(4)] + [("model_1", "aggregate", "all")]
    scripted_pool(
        pool_dir,
        "fan",
        doc_steps,
        simulation={
            "workers": {
                name: {"first_token_s": 0.4, "tokens_per_s": 1e9, "output_tokens": 1} for name in ("alpha", "beta")
            }
        },
    )
    run = await orchestrate(service, "task", pool="fan")
    assert run.status == "done"
    starts = sorted(dt.datetime.fromisoformat(s.started_at) for s in run.steps[:4])
    # the workflow's own wall, not the plan's (whose first call may import litellm): critical path 0.8 s, sequential 2.0
    workflow_wall = (dt.datetime.fromisoformat(run.steps[4].ended_at) - starts[0]).total_seconds()
    assert workflow_wall < 1.4, workflow_wall
    assert (starts[-1] - starts[0]).total_seconds() < 0.2  # the four branches started together
    assert run.steps[4].started_at >= max(s.ended_at for s in run.steps[:4])


async def test_costs_and_totals_add_up(service: Service) -> None:
    run = await orchestrate(
        service, "Prove it.", pool="testpool", metadata={"domain": "math", "answer": "1", "difficulty": "hard"}
    )
    assert run.status == "done" and len(run.steps) >= 3
    pool = service.pools.get("testpool")
    for step in run.steps:
        price = pool.get(step.worker_id).price
        expected = (step.prompt_tokens * price.input_per_mtok + step.completion_tokens * price.output_per_mtok) / 1e6
        assert step.cost_usd == pytest.approx(expected)
        assert step.latency_s > 0 and step.started_at <= step.ended_at  # a real call takes some time
    total = sum(s.cost_usd for s in run.steps) + sum(c.cost_usd for c in run.conductor_calls)
    assert run.totals.cost_usd == pytest.approx(total)
    assert (
        run.totals.total_tokens
        == sum(s.prompt_tokens + s.completion_tokens for s in run.steps) + run.totals.conductor_tokens
    )
    assert run.totals.steps == len(run.steps) and run.totals.calls == len(run.steps) + 1


async def test_token_budget_stops_before_the_call(service: Service, pool_dir: Path) -> None:
    scripted_pool(
        pool_dir, "budget", [("model_0", "first", []), ("model_1", "second", [0]), ("model_2", "third", "all")]
    )
    probe = await orchestrate(service, "task", pool="budget")
    after_first = (
        probe.conductor_calls[0].prompt_tokens
        + probe.conductor_calls[0].completion_tokens
        + probe.steps[0].prompt_tokens
        + probe.steps[0].completion_tokens
    )
    run = await orchestrate(service, "task", pool="budget", budget=Budget(max_tokens=after_first + 5))
    assert run.status == "done" and run.stop is not None and run.stop.kind == "token_budget"  # a clean stop
    assert "token budget reached" in run.stop.detail and run.error is None
    assert [s.status for s in run.steps] == ["done", "skipped", "skipped"]
    assert [s.stop.kind if s.stop else None for s in run.steps] == [None, "token_budget", "token_budget"]
    assert run.totals.total_tokens <= after_first + 5
    assert run.answer == run.steps[0].output  # the best answer so far


async def test_usd_budget_stops_before_the_call(service: Service, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "usd", [("model_0", "first", []), ("model_1", "second", [0])])
    run = await orchestrate(service, "task", pool="usd", budget=Budget(max_usd=1e-9))
    assert run.status == "failed" and "USD budget reached" in run.error  # nothing finished: no answer to give
    assert run.stop is not None and run.stop.kind == "usd_budget" and run.answer is None
    assert [s.status for s in run.steps] == ["skipped", "skipped"]


async def test_failed_step_keeps_finished_work_and_skips_dependents(service: Service, pool_dir: Path) -> None:
    doc_steps = [("model_0", "ok", []), ("model_1", "breaks", []), ("model_2", "needs both", [0, 1])]
    doc = sim_pool_doc()
    doc["workers"][1] = {
        "id": "beta",
        "model": "openai/beta",
        "description": "down",
        "params": {"mock_response": "litellm.InternalServerError"},
        "max_retries": 1,
    }
    scripted_pool(pool_dir, "fail", doc_steps, workers=doc["workers"])
    run = await orchestrate(service, "task", pool="fail")
    assert run.status == "failed" and "step 1 (beta) failed" in run.error
    assert [s.status for s in run.steps] == ["done", "failed", "skipped"]
    assert len(run.steps[1].attempts) == 2 and not any(a.ok for a in run.steps[1].attempts)
    stored = service.get_run(run.id)
    assert stored.steps[0].output == run.steps[0].output and stored.status == "failed"


async def test_fallback_worker_answers_and_is_recorded(service: Service, pool_dir: Path) -> None:
    doc = sim_pool_doc()
    doc["workers"][0] = {
        "id": "alpha",
        "model": "openai/alpha",
        "description": "down",
        "max_retries": 0,
        "params": {"mock_response": "litellm.RateLimitError"},
        "fallbacks": ["gamma"],
    }
    scripted_pool(pool_dir, "fb", [("model_0", "solve", [])], workers=doc["workers"])
    run = await orchestrate(service, "task", pool="fb", metadata={"answer": "1"})
    step = run.steps[0]
    assert run.status == "done" and step.worker_id == "alpha" and step.answered_by == "sim/gamma"
    assert [(a.worker, a.ok) for a in step.attempts] == [("alpha", False), ("gamma", True)]


async def test_step_timeout(tmp_path: Path, pool_dir: Path) -> None:
    doc = sim_pool_doc()
    doc["workers"][0] = {
        "id": "alpha",
        "model": "openai/slow",
        "description": "slow",
        "max_retries": 0,
        "params": {"mock_response": "late", "mock_delay": 5},
    }
    scripted_pool(pool_dir, "slow", [("model_0", "solve", [])], workers=doc["workers"])
    settings = Settings.from_env(state_dir=tmp_path / "s", pool_path=(pool_dir,), step_timeout_s=0.3)
    started = time.perf_counter()
    async with Service.open(settings) as service:
        run = await orchestrate(service, "task", pool="slow")
    assert time.perf_counter() - started < 3
    assert run.status == "failed" and "timed out after 0.3s" in run.steps[0].error


async def test_cancellation_keeps_finished_steps(service: Service, pool_dir: Path, monkeypatch) -> None:
    service.providers.sim_time_scale = 1
    scripted_pool(
        pool_dir,
        "cancel",
        [("model_2", "quick", []), ("model_0", "slow", [0])],
        simulation={
            "workers": {
                "gamma": {"first_token_s": 0.05, "output_tokens": 1},
                "alpha": {"first_token_s": 30, "output_tokens": 1},
            }
        },
    )
    second_step_started = asyncio.Event()

    async def listen(event) -> None:
        if event.kind == "step_started" and event.step.index == 1:
            second_step_started.set()

    async with owned_task(orchestrate(service, "task", pool="cancel", on_event=listen)) as task:
        await asyncio.wait_for(second_step_started.wait(), timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    run_id = service.list_runs(1)[0]["id"]
    stored = service.get_run(run_id)
    assert stored.status == "cancelled"
    assert [s.status for s in stored.steps] == ["done", "cancelled"]
    assert stored.steps[0].output


async def test_progress_events_in_order(service: Service) -> None:
    events = []

    async def listen(event) -> None:
        events.append((event.kind, event.finished_steps))

    await orchestrate(service, "task", pool="testpool", on_event=listen)
    kinds = [k for k, _ in events]
    assert kinds[:2] == ["conductor_started", "conductor_finished"] and kinds[-1] == "run_finished"
    assert kinds.count("step_started") == kinds.count("step_finished") >= 1


async def test_a_failing_progress_listener_does_not_break_the_run(service: Service) -> None:
    async def broken(event) -> None:
        raise RuntimeError("listener bug")

    run = await orchestrate(service, "task", pool="testpool", on_event=broken)
    assert run.status == "done"


# --------------------------------------------------------------------------------------------- service


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": ""}, "task: must be a non-empty string"),
        ({"task": "x" * 100_001}, "task: 100001 characters exceeds the limit"),
        ({"task": "x", "context": "y" * 400_001}, "context: 400001 characters exceeds the limit"),
        ({"task": "x", "max_steps": 0}, "max_steps: must be between 1 and 20"),
        ({"task": "x", "max_steps": 21}, "max_steps: must be between 1 and 20"),
        ({"task": "x", "pool": "nope"}, "pool: unknown pool 'nope'"),
    ],
)
async def test_bad_requests_name_the_field(service: Service, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError, match=message):
        await orchestrate(service, **kwargs)
    assert service.list_runs() == []


async def test_plan_then_run_the_stored_plan(service: Service) -> None:
    planned = await plan(service, "task", pool="testpool", metadata={"answer": "1"})
    assert planned.status == "planned" and planned.steps == [] and planned.workflow.steps
    run = await service.run_planned(planned.id)
    assert run.id == planned.id and run.status == "done"
    assert len(run.steps) == len(planned.workflow.steps)
    with pytest.raises(RequestError, match="is done, not planned"):
        await service.run_planned(planned.id)


async def test_runs_survive_the_process_and_render(service: Service) -> None:
    run = await orchestrate(service, "task with | pipe", pool="testpool", context="some code", metadata={"answer": "1"})
    reopened = SqliteStore(service.settings.db_path)
    stored = reopened.load_run(run.id)
    assert stored.model_dump() == run.model_dump(exclude={"updated_at"}) | {"updated_at": stored.updated_at}
    markdown = to_markdown(stored)
    assert markdown.startswith("## Answer") and "```mermaid" in markdown and run.id in markdown
    with pytest.raises(RunNotFound):
        reopened.load_run("0" * 16)
    assert reopened.list_runs(5)[0]["id"] == run.id


def test_run_ids_are_random() -> None:
    from conductor_mcp.core.records import new_run_id

    ids = {new_run_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(len(i) == 16 for i in ids)


def test_shipped_sim_pool_runs(tmp_path: Path) -> None:
    settings = Settings.from_env(state_dir=tmp_path / "s")  # CONDUCTOR_POOL=sim (conftest)
    run = in_service(
        settings, lambda service: orchestrate(service, "What is 6*7?", metadata={"domain": "math", "answer": "42"})
    )
    assert run.pool == "sim" and run.status == "done"
    assert load_pool("sim", list(settings.pool_dirs)).digest() == run.pool_digest


def test_completion_prompt_for_base_models() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "# Task\nWhat is 2+2?\n\n# Your instruction\nAnswer it."},
    ]
    assert completion_prompt(messages) == (
        "Be brief.\n\nQuestion: Task:\nWhat is 2+2?\n\nYour instruction:\nAnswer it.\nAnswer:"
    )


async def test_a_step_that_raises_unexpectedly_cancels_its_running_siblings(tmp_path: Path, pool_dir: Path) -> None:
    """A bug in one step (here: its provider call raises a RuntimeError) stops the run at once: the slow sibling
    already calling its model is cancelled (the simulator's call log shows its call never finished), the step
    waiting on it is never called, and the run ends failed naming the step, with what finished kept."""
    slow = {"workers": {"alpha": {"first_token_s": 2.0, "output_tokens": 5}}}
    steps = [("model_0", "slow", []), ("model_1", "breaks", []), ("model_2", "after the slow one", [0])]
    scripted_pool(pool_dir, "crash", steps, simulation=slow)
    calls = tmp_path / "calls.jsonl"
    settings = Settings.from_env(state_dir=tmp_path / "s", pool_path=(pool_dir,), sim_call_log=calls, sim_time_scale=1)
    async with Service.open(settings) as service:
        real = service.providers.complete

        async def buggy(spec, messages, **kwargs):
            if kwargs.get("label") == "beta":
                await asyncio.sleep(0.1)  # the slow sibling is calling its model by now
                raise RuntimeError("a bug in our own code")
            return await real(spec, messages, **kwargs)

        service.providers.complete = buggy  # type: ignore[method-assign]
        started = time.perf_counter()
        run = await orchestrate(service, "task", pool="crash")
        elapsed = time.perf_counter() - started
    assert elapsed < 1.5, elapsed  # nobody waited for the slow sibling's 2 s
    assert run.status == "failed" and run.stop is not None and run.stop.kind == "internal_error"
    assert run.stop.step == "1" and "RuntimeError: a bug in our own code" in run.stop.detail
    assert [s.status for s in run.steps] == ["cancelled", "failed", "skipped"]
    called = [json.loads(line)["model"] for line in calls.read_text().splitlines()] if calls.exists() else []
    assert "sim/alpha" not in called and "sim/gamma" not in called, called  # only the conductor's call finished


async def _fan_out(tmp_path: Path, branches: int, **limits: Any) -> Run:
    """A run of `branches` independent steps, executed straight from its stored plan under `limits`."""
    store = SqliteStore(tmp_path / "runs.sqlite3")
    pool = parse_pool(sim_pool_doc(), source="test", default_name="testpool")
    steps = [Step(worker="model_0", instruction=f"part {i}: " + "detail " * 600, access=[]) for i in range(branches)]
    run = planned_run(pool, steps, "fan", **limits)
    store.save_run(run)
    providers = Providers(Settings.from_env(state_dir=tmp_path, sim_time_scale=0))
    try:
        await Executor(pool, store, providers).execute(run)
    finally:
        await providers.aclose()
        store.close()
    return run


async def test_a_fan_out_started_in_one_pass_stays_within_the_call_cap(tmp_path: Path) -> None:
    """The steps of a fan-out start in one pass; each claims its call as it is admitted, so the fourth branch
    sees three claims, not none (every branch used to start, and a cap of 2 paid for 4 calls)."""
    run = await _fan_out(tmp_path, 4, max_calls=2)
    assert [s.status for s in run.steps] == ["done", "done", "skipped", "skipped"]
    assert run.steps[2].stop is not None and run.steps[2].stop.detail == "call budget reached: 2 of 2 calls used"
    assert run.status == "done" and run.stop is not None and run.stop.kind == "call_cap"


async def test_a_fan_out_counts_its_unpaid_calls_against_the_token_budget(tmp_path: Path) -> None:
    """Branches started together are not paid yet when the next one is admitted: each counts at its estimate,
    so a budget for about one branch starts one, not all three."""
    one_branch = estimated_tokens([{"content": "part 0: " + "detail " * 600}])
    run = await _fan_out(tmp_path, 3, max_calls=10, budget=Budget(max_tokens=int(one_branch * 1.8)))
    assert [s.status for s in run.steps] == ["done", "skipped", "skipped"]
    assert run.stop is not None and run.stop.kind == "token_budget"
    assert run.totals.total_tokens <= int(one_branch * 1.8)


async def test_runs_in_flight_together_count_each_others_unpaid_calls_against_the_server_budget(
    tmp_path: Path,
) -> None:
    """The server's budget is shared by its runs: while one run's call is in flight, unpaid, another run's call is
    admitted against that call's estimate too, so a server budget for about one call starts one, not two. A claim
    ends with its run, here cancelled mid-call, so it does not hold the budget afterwards."""
    store = SqliteStore(tmp_path / "runs.sqlite3")
    pool = parse_pool(slow_pool_doc("slow", first_token_s=60.0), source="test", default_name="slow")
    instruction = "part 0: " + "detail " * 600
    one_call = estimated_tokens([{"content": instruction}])
    budget = ServerBudget(max_tokens=int(one_call * 1.8))
    providers = Providers(Settings.from_env(state_dir=tmp_path, sim_time_scale=1))
    calling = asyncio.Event()

    async def on_event(event: ProgressEvent) -> None:
        if event.kind == "step_started":
            calling.set()

    def run_of(run_id: str) -> Run:
        run = planned_run(pool, [Step(worker="model_0", instruction=instruction, access=[])], run_id)
        store.save_run(run)
        return run

    first, second = run_of("first"), run_of("second")
    try:
        executing = Executor(pool, store, providers, on_event, server_budget=budget).execute(first)
        async with owned_task(executing) as in_flight:
            await calling.wait()
            assert budget.unpaid_tokens >= one_call and budget.tokens == 0
            await Executor(pool, store, providers, server_budget=budget).execute(second)
        assert in_flight.cancelled() and first.steps[0].status == "cancelled"
        assert second.steps[0].status == "skipped" and second.stop is not None
        assert second.stop.kind == "server_budget" and "~" in second.stop.detail
        assert (budget.unpaid_tokens, budget.unpaid_usd) == (0, 0.0)  # the cancelled call's claim ended with it
    finally:
        await providers.aclose()
        store.close()
