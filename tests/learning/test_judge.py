"""The judgement of a training run, on a run folder written the way tools/train_conductor.py writes one."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.learning import card, comparison, decisions, judge, subpools, train_options, training
from conductor_mcp.learning.rewards import Outcome
from conductor_mcp.service.catalogue import load_pool


def fake_run(out: Path, policy: dict[str, str]) -> argparse.Namespace:
    """A run folder with a card and held-out files whose completions the given decisions (by label) wrote."""
    args = train_options.parse_args(
        [
            "--base-model",
            "m",
            "--pool",
            "sim-composed",
            "--sim-set",
            "composed",
            "--sim-tasks",
            "16",
            "--eval-tasks",
            "12",
            "--subpool-k",
            "4",
            "--permute-ids",
            "--steps",
            "4",
            "--questions",
            "2",
            "--cost-weight",
            "0.2",
            "--completion",
            "decisions",
            "--out",
            str(out),
        ]
    )
    pool = load_pool("sim-composed", [builtin_pool_dir()])
    tasks = train_options.held_out_tasks(args)
    avoid = {subpools.worker_order(p) for p in subpools.training_pools(args, pool, 0)}
    recipe = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    outcomes = [Outcome(0.1, True), Outcome(0.1, True), Outcome(0.0, False), Outcome(1.0, True, True)]
    rollouts = [card.rollout_stats(["a", "b", "c", "c"], tasks[:1], outcomes, group=2)] * 3
    trained = {"recipe": recipe, "rollouts": rollouts, "wall_s": {"grpo": 1.0}}
    (out / ("card.json" if policy else "recipe.json")).write_text(json.dumps(trained if policy else recipe))
    for label, written in policy.items():
        with (out / f"held_out_{label}.jsonl").open("w") as sink:
            for task in tasks:
                sub = subpools.held_out_pool(args, pool, task, avoid)
                completion = training.completion_text(args, written, sub, task)
                row = {
                    "task_id": task["id"],
                    "completion": completion,
                    "pool_workers": list(subpools.worker_order(sub)),
                }
                sink.write(json.dumps(row) + "\n")
    return args


async def test_the_judgement_pairs_every_strategy_on_the_same_tasks_and_pools(tmp_path: Path) -> None:
    fake_run(tmp_path, {"after": "model_0+ model_1+ model_2+", "after_sft": "model_0"})
    report = await judge.judge(judge.parse_args(["--run", str(tmp_path), "--oracle-tasks", "24"]))
    names = set(report["strategies"])
    assert {
        "trained",
        "warm start",
        "router",
        "router (no pitfall)",
        "scripted conductor",
        "moa",
        "moa (pitfall named)",
        "oracle (max reward)",
        "oracle (max accuracy)",
        "hindsight ceiling",
    } <= names
    assert all(m["tasks"] == 12 for m in report["strategies"].values())
    ceiling = report["strategies"]["hindsight ceiling"]
    assert all(
        ceiling["mean_reward"] >= report["strategies"][f"pattern {p}"]["mean_reward"] for p in comparison.PATTERNS
    )
    assert report["strategies"]["moa"]["tokens_vs_moa"] == 1.0
    assert set(report["paired"]["trained vs warm start"]) == {"correct", "reward"}
    assert report["written"]["warm start"] and sum(report["written"]["trained"].values()) == 12
    assert (
        report["strategies"]["trained"]["steps_per_task"] == 3
        and report["strategies"]["warm start"]["steps_per_task"] == 1
    )
    assert "| trained |" in (tmp_path / "judged.md").read_text()
    assert report["diagnosis"]["flat groups"] == 3 and report["diagnosis"]["groups"] == 6
    assert (tmp_path / "rollouts.png").read_bytes()[:4] == b"\x89PNG"


async def test_baselines_and_oracles_are_judged_while_the_policy_trains(tmp_path: Path) -> None:
    """From the run's recipe.json alone; the outcomes are kept, so judging again runs no workflow twice."""
    fake_run(tmp_path, {})
    report = await judge.judge(judge.parse_args(["--run", str(tmp_path), "--oracle-tasks", "8"]))
    assert "trained" not in report["strategies"] and report["strategies"]["router"]["tasks"] == 12
    kept = (tmp_path / "judge-cache.jsonl").read_text()
    again = await judge.judge(judge.parse_args(["--run", str(tmp_path), "--oracle-tasks", "8"]))
    assert again == report and (tmp_path / "judge-cache.jsonl").read_text() == kept


def test_paired_tests() -> None:
    assert comparison.paired_correct([True, True, False], [False, True, True]) == {
        "wins": 1,
        "losses": 1,
        "p_value": 1.0,
    }
    same = comparison.paired_reward([0.5, 0.2], [0.5, 0.2])
    assert same["p_value"] == 1.0 and same["mean_diff"] == 0
    rng = random.Random(1)
    better = [rng.random() for _ in range(600)]
    assert comparison.paired_reward([b + 0.05 for b in better], better)["p_value"] < 1e-6


def test_a_malformed_policy_row_is_a_malformed_signature() -> None:
    pool = load_pool("sim-composed", [builtin_pool_dir()]).sample(4, seed=3, permute=True)
    assert decisions.completion_workflow("hello", pool, {}) == "hello"
    assert judge.row("x", {"id": "t"}, pool, judge.Outcome(0.0, False), None)["signature"] == "malformed"
