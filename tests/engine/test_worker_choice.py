"""The caller's choice of workers through the service and the engine: the conductor sees only the allowed workers,
fallbacks never leave them, and the run records the choice (stored, resumed with it, shown in the transcript)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor_mcp.core.choice import WorkerChoice
from conductor_mcp.doors.render import to_markdown
from conductor_mcp.errors import RequestError
from conductor_mcp.service.service import Service
from tests.conftest import orchestrate, plan, scripted_pool, sim_pool_doc, write_pool


def down(worker_id: str, fallbacks: list[str]) -> dict:
    return {
        "id": worker_id,
        "model": f"openai/{worker_id}",
        "description": "down",
        "max_retries": 0,
        "params": {"mock_response": "litellm.RateLimitError"},
        "fallbacks": fallbacks,
    }


async def test_the_conductor_plans_over_the_allowed_workers_only(service: Service, pool_dir: Path) -> None:
    write_pool(pool_dir, sim_pool_doc(name="open", anonymize=False))
    choice = WorkerChoice(exclude=("beta",))
    run = await orchestrate(service, "Write a sorting function in Python and test it.", pool="open", workers=choice)
    assert run.status == "done" and run.steps
    assert {s.worker_id for s in run.steps} <= {"alpha", "gamma"}
    stored = service.get_run(run.id)
    assert stored.workers == choice and stored.worker_ids == ["alpha", "gamma"]
    assert "**Workers:** exclude beta → alpha, gamma" in to_markdown(stored)


async def test_a_worker_outside_the_choice_cannot_be_named(service: Service, pool_dir: Path) -> None:
    """The scripted conductor names model_2 (gamma in the whole pool); with only alpha and beta allowed there is
    no model_2, so the workflow is repaired onto the allowed default and gamma is never called."""
    scripted_pool(pool_dir, "named", [("model_2", "solve", [])])
    run = await orchestrate(service, "task", pool="named", workers=WorkerChoice(only=("alpha", "beta")))
    assert run.status == "done" and [s.worker_id for s in run.steps] == ["alpha"]
    assert run.repairs or run.fallback_reason


async def test_fallbacks_never_leave_the_allowed_set(service: Service, pool_dir: Path) -> None:
    doc = sim_pool_doc()
    doc["workers"][0] = down("alpha", ["gamma", "beta"])
    scripted_pool(pool_dir, "fb", [("model_0", "solve", [])], workers=doc["workers"])
    run = await orchestrate(service, "task", pool="fb", workers=WorkerChoice(exclude=("gamma",)))
    step = run.steps[0]
    assert run.status == "done" and step.answered_by == "sim/beta"
    assert [(a.worker, a.ok) for a in step.attempts] == [("alpha", False), ("beta", True)]

    run = await orchestrate(service, "task", pool="fb", workers=WorkerChoice(only=("alpha",)))
    step = run.steps[0]
    assert run.status == "failed" and [(a.worker, a.ok) for a in step.attempts] == [("alpha", False)]


async def test_a_planned_run_runs_with_its_choice(service: Service, pool_dir: Path) -> None:
    doc = sim_pool_doc()
    doc["workers"][1] = down("beta", ["alpha", "gamma"])
    scripted_pool(pool_dir, "later", [("model_0", "solve", [])], workers=doc["workers"])
    planned = await plan(service, "task", pool="later", workers=WorkerChoice(exclude=("alpha",)))
    assert planned.worker_ids == ["beta", "gamma"]
    assert service.run_pool(planned).get("beta").fallbacks == ["gamma"]
    run = await service.run_planned(planned.id)
    step = run.steps[0]
    assert step.worker_id == "beta" and step.answered_by == "sim/gamma"
    assert [a.worker for a in step.attempts] == ["beta", "gamma"]


async def test_a_follow_up_keeps_the_choice(service: Service, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "again", [("model_0", "solve", [])], recursion=True)
    run = await orchestrate(service, "task", pool="again", workers=WorkerChoice(only=("gamma",)))
    assert run.steps[0].worker_id == "gamma"
    child = service.continue_run(run.id, feedback="shorter, please")
    assert child.workers == run.workers and child.worker_ids == ["gamma"]
    await service.wait(child.id, None)


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"only": ["alpha", "omega"]}, "workers.only: 'omega' not in pool 'testpool'"),
        ({"exclude": ["alpha", "beta", "gamma"]}, "leaves no worker of pool 'testpool'"),
    ],
)
async def test_a_bad_choice_starts_nothing(service: Service, choice: dict, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        await orchestrate(service, "task", pool="testpool", workers=choice)
    assert service.list_runs(10) == []
