"""Recursive test-time scaling on the simulator: the conductor corrects its team, stops, and is capped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conductor_mcp.core import prompts
from conductor_mcp.core.workflow import workflow_json_schema
from conductor_mcp.doors.render import mermaid, to_markdown
from conductor_mcp.service.service import Service
from tests.conftest import orchestrate, write_pool

MATH = {"domain": "math", "answer": "42"}


def recursive_pool(pool_dir: Path, name: str, conductor_profile: dict[str, Any] | None = None, **overrides: Any) -> str:
    """A misleading pool: the worker that claims math is always wrong; two modest ones are always right."""
    doc = {
        "name": name,
        "anonymize": False,
        "recursion": True,
        "max_steps": 4,
        "conductor": {"model": "sim/conductor"},
        "workers": [
            {"id": "boaster", "model": "sim/boaster", "description": "strongest at math, very confident"},
            {"id": "careful", "model": "sim/careful", "description": "good at math"},
            {"id": "steady", "model": "sim/steady", "description": "good at math"},
        ],
        "simulation": {
            "conductors": {"conductor": conductor_profile or {}},
            "workers": {
                "boaster": {"skills": {"math": 0.0}},
                "careful": {"skills": {"math": 1.0}},
                "steady": {"skills": {"math": 1.0}},
            },
        },
        **overrides,
    }
    write_pool(pool_dir, doc)
    return name


def answer_of(text: str | None) -> str:
    return (text or "").rsplit("ANSWER:", 1)[-1].strip()


def tree(run) -> list[tuple[str, int, str | None, str]]:
    return sorted((s.key, s.depth, s.parent, s.worker_id) for s in run.steps)


def test_the_conductor_is_offered_as_a_worker(service: Service, pool_dir: Path) -> None:
    pool = service.pools.get(recursive_pool(pool_dir, "offered"))
    assert pool.offered_ids() == ["boaster", "careful", "steady", "conductor"]
    assert "- conductor: You, the Conductor" in prompts.system_prompt(pool, 4)
    schema = workflow_json_schema(pool.offered_ids(), 4)
    assert "conductor" in schema["properties"]["steps"]["items"]["properties"]["worker"]["enum"]


async def test_without_recursion_the_wrong_answer_stands(service: Service, pool_dir: Path) -> None:
    run = await orchestrate(service, "What is 6*7?", pool=recursive_pool(pool_dir, "plain"), metadata=MATH)
    assert run.status == "done" and answer_of(run.answer) != "42"
    assert [s.worker_id for s in run.steps] == ["boaster"]


async def test_a_corrective_workflow_fixes_a_wrong_answer(service: Service, pool_dir: Path) -> None:
    run = await orchestrate(
        service, "What is 6*7?", pool=recursive_pool(pool_dir, "fixes"), metadata=MATH, self_correct=True
    )
    assert run.status == "done"
    first = next(s for s in run.steps if s.key == "0")
    assert answer_of(first.output) != "42"  # the team's first answer was wrong
    review = next(s for s in run.steps if s.key == "1")
    assert review.worker_id == "conductor" and review.access == [0] and review.finish_reason == "corrected"
    assert review.conductor_call and review.conductor_call.raw_output  # the conductor's own output is kept
    prompt = service.step_messages(run.id, "1")[1]["content"]
    assert first.output in prompt  # the wrong answer was visible to the recursive step
    assert tree(run) == [
        ("0", 0, None, "boaster"),
        ("1", 0, None, "conductor"),
        ("1.0", 1, "1", "careful"),
        ("1.1", 1, "1", "steady"),
        ("1.2", 1, "1", "careful"),
    ]
    assert answer_of(run.answer) == "42" and run.answer == next(s for s in run.steps if s.key == "1.2").output
    markdown = to_markdown(run)
    assert "| ↳ 1.0 | careful |" in markdown and "s1 -.-> s1_0" in mermaid(run) and "s1_0 --> s1_2" in mermaid(run)
    assert run.totals.conductor_tokens > run.conductor_calls[0].prompt_tokens  # the recursive call is counted


async def test_the_conductor_stops_when_the_answer_stands(service: Service, pool_dir: Path) -> None:
    pool = recursive_pool(
        pool_dir,
        "stops",
        workers=[
            {"id": "careful", "model": "sim/careful", "description": "good at math"},
            {"id": "steady", "model": "sim/steady", "description": "good at math"},
        ],
    )
    run = await orchestrate(service, "Prove that 6*7 = 42, step by step.", pool=pool, metadata=MATH, self_correct=True)
    review = run.steps[-1] if run.steps[-1].worker_id == "conductor" else None
    assert review is not None and review.finish_reason == "stop: the current answer stands"
    assert review.workflow is not None and review.workflow.steps == []
    assert not any(s.depth > 0 for s in run.steps)
    assert run.status == "done" and answer_of(run.answer) == "42"


async def test_depth_cap_stops_a_conductor_that_never_stops(service: Service, pool_dir: Path) -> None:
    pool = recursive_pool(pool_dir, "forever", {"always_recurse": True}, max_depth=2)
    run = await orchestrate(service, "What is 6*7?", pool=pool, metadata=MATH)
    assert run.status == "done" and run.error is None
    assert tree(run) == [
        ("0", 0, None, "boaster"),
        ("1", 0, None, "conductor"),
        ("1.0", 1, "1", "conductor"),
        ("1.0.0", 2, "1.0", "conductor"),
    ]
    deepest = next(s for s in run.steps if s.key == "1.0.0")
    assert deepest.finish_reason == "depth cap (2) reached: the current answer stands"
    assert run.stop is not None and run.stop.kind == "depth_cap" and run.stop.step == "1.0.0"
    assert "depth cap (2) reached" in run.stop.detail
    assert run.answer == run.steps[0].output  # the best answer so far


async def test_call_budget_stops_a_conductor_that_never_stops(service: Service, pool_dir: Path) -> None:
    pool = recursive_pool(pool_dir, "budget", {"always_recurse": True}, max_depth=5, max_steps=2)
    run = await orchestrate(service, "What is 6*7?", pool=pool, metadata=MATH)
    assert run.max_calls == 4
    assert run.status == "done" and run.stop is not None and run.stop.kind == "call_cap"
    assert run.stop.detail == "call budget reached: 4 of 4 calls used"
    started = [s for s in run.steps if s.status not in ("pending", "skipped")]
    assert len(started) == 4 and run.answer == run.steps[0].output
    assert "Stopped early" in to_markdown(run)
