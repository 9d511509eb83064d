"""Fault injection against a real, deliberately unreliable OpenAI-compatible server on loopback.

Each fault ends in a correct answer via retry or fallback, or in a clean `failed` run that keeps everything
that finished.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conductor_mcp.service.service import Service
from tests.conftest import orchestrate, scripted_pool, worker, write_pool

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUCTOR_RETRY_BASE_S", "0.01")


def stats(base: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{base}/stats", timeout=5) as response:
        return json.load(response)


def pool_of(pool_dir: Path, name: str, base: str, workers: list[dict[str, Any]], steps, **overrides: Any) -> str:
    return scripted_pool(pool_dir, name, steps, workers=[worker(base, "ok"), *workers], anonymize=False, **overrides)


async def test_rate_limit_storm_is_ridden_out(service: Service, pool_dir: Path, faulty_base: str) -> None:
    pool = pool_of(
        pool_dir, "storm", faulty_base, [worker(faulty_base, "storm", max_retries=8)], [("storm", "Solve it.", [])]
    )
    before = stats(faulty_base).get("storm", 0)
    runs = await asyncio.gather(*(orchestrate(service, f"task {i}", pool=pool) for i in range(8)))
    assert all(run.status == "done" and run.answer.endswith("ANSWER: 42") for run in runs)
    attempts = [a for run in runs for a in run.steps[0].attempts]
    assert sum(a.ok for a in attempts) == 8 and any("RateLimitError" in (a.error or "") for a in attempts)
    assert stats(faulty_base)["storm"] - before == len(attempts)  # every attempt is in the provenance


async def test_500s_are_retried(service: Service, pool_dir: Path, faulty_base: str) -> None:
    pool = pool_of(
        pool_dir,
        "five",
        faulty_base,
        [worker(faulty_base, "flaky500-2", max_retries=2)],
        [("flaky500-2", "Solve it.", [])],
    )
    run = await orchestrate(service, "task", pool=pool)
    assert run.status == "done"
    assert [a.ok for a in run.steps[0].attempts] == [False, False, True]


async def test_timeouts_fall_back_to_another_worker(service: Service, pool_dir: Path, faulty_base: str) -> None:
    slow = worker(faulty_base, "slow", timeout_s=0.5, max_retries=1, fallbacks=["ok"])
    pool = pool_of(pool_dir, "timeouts", faulty_base, [slow], [("slow", "Solve it.", [])])
    started = time.perf_counter()
    run = await orchestrate(service, "task", pool=pool)
    assert time.perf_counter() - started < 10  # never a hang: every attempt has a deadline
    step = run.steps[0]
    assert run.status == "done" and step.answered_by == "hosted_vllm/ok"
    assert [(a.worker, a.ok) for a in step.attempts] == [("slow", False), ("slow", False), ("ok", True)]
    assert "Timeout" in step.attempts[0].error


async def test_client_errors_are_not_retried(service: Service, pool_dir: Path, faulty_base: str) -> None:
    pool = pool_of(
        pool_dir,
        "fourhundred",
        faulty_base,
        [worker(faulty_base, "badrequest", max_retries=5)],
        [("badrequest", "Solve it.", [])],
    )
    run = await orchestrate(service, "task", pool=pool)
    assert run.status == "failed" and len(run.steps[0].attempts) == 1


async def test_a_worker_down_all_run_fails_cleanly_keeping_finished_work(
    service: Service, pool_dir: Path, faulty_base: str
) -> None:
    pool = pool_of(
        pool_dir,
        "down",
        faulty_base,
        [worker(faulty_base, "down", max_retries=2)],
        [("ok", "Solve it.", []), ("down", "Check it.", [0]), ("ok", "Final.", "all")],
    )
    run = await orchestrate(service, "task", pool=pool)
    assert run.status == "failed" and "step 1 (down) failed" in run.error and "503" in run.error
    assert [s.status for s in run.steps] == ["done", "failed", "skipped"]
    assert run.answer == run.steps[0].output  # the best answer so far, flagged by the status
    stored = service.get_run(run.id)
    assert stored.steps[0].output == run.steps[0].output and len(stored.steps[1].attempts) == 3


async def test_with_recursion_the_conductor_replans_around_a_dead_worker(
    service: Service, pool_dir: Path, faulty_base: str
) -> None:
    doc = {
        "name": "replan",
        "anonymize": False,
        "recursion": True,
        "max_steps": 4,
        "conductor": {"model": "hosted_vllm/conductor", "api_base": f"{faulty_base}/v1", "structured_output": "none"},
        "workers": [worker(faulty_base, "ok"), worker(faulty_base, "down", max_retries=1)],
    }
    write_pool(pool_dir, doc)
    run = await orchestrate(service, "task", pool="replan")
    keys = {s.key: s for s in run.steps}
    assert keys["1"].status == "failed" and keys["2"].status == "skipped"
    recovery = keys["3"]
    assert recovery.worker_id == "conductor" and recovery.recovery and recovery.finish_reason == "corrected"
    assert recovery.access == [0] and keys["3.0"].worker_id == "ok"
    assert run.status == "done" and run.answer.endswith("ANSWER: 42")


async def test_a_garbage_conductor_falls_back_and_the_answer_is_right(
    service: Service, pool_dir: Path, faulty_base: str
) -> None:
    doc = {
        "name": "garbage",
        "anonymize": False,
        "default_worker": "ok",
        "conductor": {"model": "hosted_vllm/garbage", "api_base": f"{faulty_base}/v1", "structured_output": "none"},
        "workers": [worker(faulty_base, "ok")],
    }
    write_pool(pool_dir, doc)
    run = await orchestrate(service, "task", pool="garbage")
    assert len(run.conductor_calls) == 2 and "no workflow found" in run.fallback_reason
    assert run.status == "done" and run.answer.endswith("ANSWER: 42")


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [("empty_choices", "no choices"), ("no_message", "no message"), ("non_text", "where text was expected")],
)
async def test_malformed_responses_are_retried_then_fall_back(
    service: Service, pool_dir: Path, faulty_base: str, behaviour: str, error: str
) -> None:
    malformed = worker(faulty_base, behaviour, max_retries=1, fallbacks=["ok"])
    pool = pool_of(pool_dir, behaviour, faulty_base, [malformed], [(behaviour, "Solve it.", [])])
    run = await orchestrate(service, "task", pool=pool)
    step = run.steps[0]
    assert run.status == "done" and step.answered_by == "hosted_vllm/ok" and run.answer.endswith("ANSWER: 42")
    assert [(a.worker, a.ok) for a in step.attempts] == [(behaviour, False), (behaviour, False), ("ok", True)]
    assert error in (step.attempts[0].error or "")


async def test_a_reply_with_a_lone_surrogate_and_a_nul_is_stored_sanitised(
    service: Service, pool_dir: Path, faulty_base: str
) -> None:
    pool = pool_of(
        pool_dir, "surrogate", faulty_base, [worker(faulty_base, "surrogate")], [("surrogate", "Solve it.", [])]
    )
    run = await orchestrate(service, "task", pool=pool)
    assert run.status == "done", run.error
    stored = service.get_run(run.id)
    assert stored.steps[0].output == "Half a pair: \ufffd, a NUL: \ufffd.\nANSWER: 42"
    assert stored.answer == stored.steps[0].output and len(stored.steps[0].attempts) == 1
    stored.model_dump_json()  # what every door serialises
