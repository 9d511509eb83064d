"""Evaluation: each baseline's mechanics with call counts, and the one-command report (reproducible, resumable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.errors import RequestError
from conductor_mcp.learning.evaluation import evaluate, parse_args
from conductor_mcp.learning.strategies import (
    all_strategies,
    conductor,
    mcnemar_exact,
    mixture_of_agents,
    paired,
    pipeline,
    router,
    single,
)
from conductor_mcp.service.service import Service
from tests.conftest import start

META = {"domain": "math", "answer": "42"}


async def run_strategy(service: Service, strategy, task: str = "What is 6*7?"):
    run = start(
        service,
        task,
        strategy.workflow,
        pool="testpool",
        max_steps=strategy.max_steps,
        metadata=META,
        self_correct=strategy.self_correct,
    )
    return await service.wait(run.id, None)


async def test_single_worker_is_one_call(service: Service) -> None:
    run = await run_strategy(service, single("model_1"))
    assert [s.worker_id for s in run.steps] == ["beta"] and run.conductor_calls == [] and run.totals.calls == 1


async def test_moa_calls_every_worker_then_aggregates(service: Service) -> None:
    pool = service.pools.get("testpool")
    run = await run_strategy(service, mixture_of_agents(pool))
    proposers, aggregator = run.steps[:-1], run.steps[-1]
    assert sorted(s.worker_id for s in proposers) == ["alpha", "beta", "gamma"] and all(
        s.access == [] for s in proposers
    )
    assert aggregator.access == [0, 1, 2] and aggregator.worker_id == pool.default_worker
    assert run.totals.calls == 4 and run.conductor_calls == []


async def test_two_layer_moa(service: Service) -> None:
    run = await run_strategy(service, mixture_of_agents(service.pools.get("testpool"), layers=2))
    assert [s.access for s in run.steps] == [[], [], [], [0, 1, 2], [0, 1, 2], [0, 1, 2], [3, 4, 5]]
    assert run.totals.calls == 7


async def test_pipeline_is_planner_solver_verifier(service: Service) -> None:
    run = await run_strategy(service, pipeline("model_0", "model_1", "model_2"))
    assert [(s.worker_id, s.access) for s in run.steps] == [("alpha", []), ("beta", [0]), ("gamma", [0, 1])]
    assert run.totals.calls == 3


async def test_router_is_the_conductor_picking_one_worker(service: Service) -> None:
    run = await run_strategy(service, router(), task="Prove that 6*7 = 42, step by step.")
    assert len(run.steps) == 1 and len(run.conductor_calls) >= 1 and run.max_steps == 1


async def test_conductor_with_recursion_ends_with_a_self_check(service: Service) -> None:
    run = await run_strategy(service, conductor(recursive=True))
    top = [s for s in run.steps if s.depth == 0]
    assert run.workflow.steps[-1].worker == "conductor" and top[-1].worker_id == "conductor"


def test_all_strategies_cover_the_pool(service: Service) -> None:
    names = [s.name for s in all_strategies(service.pools.get("testpool"))]
    assert names == [
        "single:model_0",
        "single:model_1",
        "single:model_2",
        "moa:1-layer",
        "pipeline",
        "router",
        "conductor",
        "conductor+recursion",
    ]


async def test_given_workflows_are_checked(service: Service) -> None:
    with pytest.raises(RequestError, match="unknown worker 'model_9'"):
        start(service, "t", pool="testpool", workflow=Workflow(steps=[Step(worker="model_9", instruction="x")]))
    with pytest.raises(RequestError, match="only see earlier steps"):
        start(
            service,
            "t",
            pool="testpool",
            workflow=Workflow(steps=[Step(worker="model_0", instruction="x", access=[0])]),
        )


async def test_one_command_report_reproducible_and_resumable(tmp_path: Path) -> None:
    args = ["--pool", "sim", "--sim-tasks", "24", "--seed", "5", "--concurrency", "4"]
    await evaluate(parse_args([*args, "--out", str(tmp_path / "a")]))
    await evaluate(parse_args([*args, "--out", str(tmp_path / "b")]))
    first = json.loads((tmp_path / "a" / "results.json").read_text())
    second = json.loads((tmp_path / "b" / "results.json").read_text())
    strip = lambda r: {n: {k: v for k, v in m.items() if k != "wall_s_per_task"} for n, m in r["strategies"].items()}  # noqa: E731
    assert strip(first) == strip(second)  # same seed, same numbers
    assert set(first["strategies"]) == {
        "single:model_0",
        "single:model_1",
        "single:model_2",
        "single:model_3",
        "moa:1-layer",
        "pipeline",
        "router",
        "conductor",
        "conductor+recursion",
    }
    tokens = {name: m["tokens_per_task"] for name, m in first["strategies"].items()}
    assert all(t > 0 for t in tokens.values())  # every strategy's calls were counted
    assert first["conductor_vs_moa_tokens"] == pytest.approx(tokens["conductor"] / tokens["moa:1-layer"])
    assert first["conductor_vs_moa_tokens"] < 1  # the conductor's few steps against every worker plus an aggregator
    for name in ("accuracy_vs_cost.png", "steps_by_domain.png"):
        assert (tmp_path / "a" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| conductor |" in (tmp_path / "a" / "results.md").read_text()
    best = first["best_single"]
    assert best == max(
        (n for n in first["strategies"] if n.startswith("single:")), key=lambda n: first["strategies"][n]["accuracy"]
    )
    versus = first["strategies"]["conductor"]["vs_best_single"]
    assert versus["tasks"] == 24 and first["strategies"][best]["vs_best_single"] is None
    assert f"| conductor | {versus['wins']} | {versus['losses']} |" in (tmp_path / "a" / "results.md").read_text()

    cache = tmp_path / "a" / "cache.jsonl"
    lines = cache.read_text().splitlines()
    assert len(lines) == 24 * 9
    cache.write_text("\n".join(lines[:100]) + "\n")  # as if the evaluation had stopped part-way
    await evaluate(parse_args([*args, "--out", str(tmp_path / "a")]))
    resumed = cache.read_text().splitlines()
    assert len(resumed) == 24 * 9 and resumed[:100] == lines[:100]
    assert strip(json.loads((tmp_path / "a" / "results.json").read_text())) == strip(first)


async def test_a_trained_conductors_written_workflows_are_scored_beside_the_baselines(tmp_path: Path) -> None:
    """--workflows NAME=FILE: completions written elsewhere (a trained adapter's) are run like every strategy; one
    the server cannot run is wrong, and the conductor's own tokens are counted at the pool's conductor price."""
    scripted = json.dumps(
        {
            "reasoning": "hard math",
            "steps": [
                {"worker": "model_0", "instruction": "Solve it. Check the units.", "access": []},
                {"worker": "model_0", "instruction": "Solve it another way. Check the units.", "access": []},
                {"worker": "model_5", "instruction": "Review both answers. Check the units.", "access": [0, 1]},
            ],
        }
    )
    written = tmp_path / "held_out_after.jsonl"
    rows = [
        {
            "task_id": f"tb-3-{i}",
            "completion": scripted if i else "not a workflow",
            "prompt_tokens": 100,
            "completion_tokens": 50,
        }
        for i in range(4)
    ]
    written.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    await evaluate(
        parse_args(
            [
                "--pool",
                "sim-structured",
                "--sim-set",
                "structured",
                "--sim-tasks",
                "4",
                "--seed",
                "3",
                "--strategies",
                "trained,moa:1-layer",
                "--workflows",
                f"trained={written}",
                "--out",
                str(out),
            ]
        )
    )
    report = json.loads((out / "results.json").read_text())["strategies"]
    trained = report["trained"]
    assert trained["failed_runs"] == 1 and trained["steps_per_task"] == 3 * 3 / 4
    assert trained["tokens_per_task"] > 150 and 0 < trained["tokens_vs_moa"] < 1
    assert report["moa:1-layer"]["steps_per_task"] == 7  # six workers and the aggregator: beyond the pool's limit
    with pytest.raises(RequestError, match="--workflows"):
        await evaluate(
            parse_args(["--pool", "sim", "--sim-tasks", "2", "--workflows", "x=/nonexistent", "--out", str(out)])
        )


def test_paired_comparison_counts_discordant_tasks_and_gives_the_exact_mcnemar_p() -> None:
    mine = [{"task_id": f"t{i}", "correct": c} for i, c in enumerate([1, 1, 1, 0, 1, 0, 1])]
    theirs = [{"task_id": f"t{i}", "correct": c} for i, c in enumerate([0, 0, 1, 1, 1, 0])]  # t6 not run
    assert paired(mine, theirs) == {"tasks": 6, "wins": 2, "losses": 1, "p_value": 1.0}
    assert mcnemar_exact(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)  # binomial(12, 1/2) tails
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2) and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(20, 0) < 1e-5
