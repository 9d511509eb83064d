"""The judgement of a training run, on a run folder written the way tools/train_conductor.py writes one."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest
import yaml

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import card, comparison, decisions, gate, judge, rejudge, subpools, train_options, training
from conductor_mcp.learning.rewards import Outcome
from conductor_mcp.service.catalogue import load_pool


def fake_run(out: Path, policy: dict[str, str], completion: str = "decisions") -> argparse.Namespace:
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
            completion,
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
                    "written": written,
                    "pool_workers": list(subpools.worker_order(sub)),
                }
                sink.write(json.dumps(row) + "\n")
    return args


async def test_the_judgement_pairs_every_strategy_on_the_same_tasks_and_pools(tmp_path: Path) -> None:
    fake_run(tmp_path, {"after": "model_0+ model_1+ model_2+", "after_sft": "model_0", "after_shuffled": "model_1"})
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
    strategies = report["strategies"]
    assert report["best_fixed_completion"] in gate.fixed_completions(4)
    assert strategies["best fixed completion"]["distinct"] == 1 and strategies["trained"]["distinct"] == 1
    assert strategies["scripted conductor"]["specialist_pick"] == 1.0
    assert strategies["scripted conductor (descriptions shuffled)"]["specialist_pick"] == 0.0
    assert {"trained vs trained (descriptions shuffled)", "trained vs best fixed completion"} <= set(report["paired"])
    rows = [json.loads(line) for line in (tmp_path / "judged-rows.jsonl").read_text().splitlines()]
    assert len(rows) == 12 * len(strategies) - 12  # every strategy's row on every task but the hindsight ceiling's
    assert {r["decisions"] for r in rows if r["strategy"] == "trained"} == {"model_0+ model_1+ model_2+"}
    assert report["diagnosis"]["flat groups"] == 3 and report["diagnosis"]["groups"] == 6
    shapes = report["steps_by_difficulty"]
    assert set(shapes) == {"trained", "warm start", "trained (descriptions shuffled)", "scripted conductor"}
    assert set(shapes["trained"].values()) == {3.0} and set(shapes["warm start"].values()) == {1.0}
    difficulties = list(shapes["scripted conductor"])
    assert difficulties[0] == "easy" and shapes["scripted conductor"]["easy"] == 1.0  # one step on easy tasks only
    assert all(shapes["scripted conductor"][d] == 3.0 for d in difficulties[1:])
    assert "| scripted conductor | 1.00 | 3.00" in (tmp_path / "judged.md").read_text()
    assert (tmp_path / "rollouts.png").read_bytes()[:4] == b"\x89PNG"


async def test_an_assessed_run_is_judged_on_its_decisions_and_reports_the_difficulty_it_wrote(
    tmp_path: Path,
) -> None:
    written = {"after": " hard. Steps: model_0+ model_1+ model_2+", "after_sft": " model_0", "after_shuffled": " x"}
    args = fake_run(tmp_path, written, completion="assessed")
    report = await judge.judge(judge.parse_args(["--run", str(tmp_path), "--oracle-tasks", "24"]))
    hard = [t["difficulty"] == "hard" for t in train_options.held_out_tasks(args)]
    assert 0 < sum(hard) < len(hard)
    assert report["assessed"]["trained"] == {"tasks": 12, "right": sum(hard) / 12, "unreadable": 0.0}
    assert report["assessed"]["warm start"]["unreadable"] == 1.0  # decisions without the difficulty before them
    assert report["strategies"]["warm start"]["well_formed"] == 0.0  # are malformed in this encoding
    assert report["strategies"]["trained"]["steps_per_task"] == 3.0  # the word does not change the workflow
    assert "router" not in report["assessed"]
    assert f"- trained: the task's own on {sum(hard) / 12:.3f} of 12 tasks" in (tmp_path / "judged.md").read_text()


async def test_baselines_and_oracles_are_judged_while_the_policy_trains(tmp_path: Path) -> None:
    """From the run's recipe.json alone; the outcomes are kept, so judging again runs no workflow twice."""
    fake_run(tmp_path, {})
    report = await judge.judge(judge.parse_args(["--run", str(tmp_path), "--oracle-tasks", "8"]))
    assert "trained" not in report["strategies"] and report["strategies"]["router"]["tasks"] == 12
    kept = (tmp_path / "judge-cache.jsonl").read_text()
    again = await judge.judge(judge.parse_args(["--run", str(tmp_path), "--oracle-tasks", "8"]))
    assert again == report and (tmp_path / "judge-cache.jsonl").read_text() == kept


def test_a_re_judgement_names_what_it_cannot_judge_before_it_loads_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every refusal comes before the train stack is touched, and none writes anything."""
    run = tmp_path / "run"
    run.mkdir()
    fake_run(run, {})
    again = ["--run", str(run), "--out", str(tmp_path / "again")]
    with pytest.raises(SystemExit):
        judge.parse_args([*again])  # --out alone would judge the run itself, not on another pool
    assert "give --pool FILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        judge.parse_args(["--run", str(run), "--pool", "sim-composed-v2"])
    assert "--pool needs --out DIR" in capsys.readouterr().err
    with pytest.raises(RequestError, match="never writes into the run it judges"):
        rejudge.rejudge(judge.parse_args(["--run", str(run), "--pool", "sim-composed-v2", "--out", str(run)]))
    with pytest.raises(RequestError, match=r"workers \['answerer', 'brainstormer', 'checker'\] are not simulated"):
        rejudge.rejudge(judge.parse_args([*again, "--pool", "local"]))
    three = yaml.safe_load((builtin_pool_dir() / "sim.yaml").read_text())
    three["workers"] = three["workers"][1:]  # the generalist, its default worker, is the last
    (tmp_path / "three.yaml").write_text(yaml.safe_dump(three))
    with pytest.raises(RequestError, match="3 workers, fewer than the run's 4-worker sub-pools"):
        rejudge.rejudge(judge.parse_args([*again, "--pool", str(tmp_path / "three.yaml")]))
    with pytest.raises(RequestError, match="no adapter/ or sft-adapter/ to run"):
        rejudge.rejudge(judge.parse_args([*again, "--pool", "sim-composed-v2"]))
    with pytest.raises(RequestError, match=r"neither card\.json nor recipe\.json"):
        rejudge.rejudge(judge.parse_args(["--run", str(tmp_path / "again"), "--pool", "sim", "--out", str(run)]))
    assert not (tmp_path / "again").exists()


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
    # Student's t against tabulated two-sided values: the exact paired t-test, not its normal approximation
    assert abs(comparison.student_t_p(2.0, 10) - 0.073388) < 1e-6
    assert abs(comparison.student_t_p(0.5, 3) - 0.651448) < 1e-6
    assert abs(comparison.student_t_p(2.228139, 10) - 0.05) < 1e-6 and comparison.student_t_p(0.0, 5) == 1.0
    few = comparison.paired_reward([1.0, 0.9, 1.0, 0.8], [0.5, 0.6, 0.4, 0.6])
    assert few["t_p_value"] > few["p_value"]  # four tasks: the normal approximation overstates the evidence


def test_shuffled_descriptions_mislead_a_reader_and_keep_the_workers() -> None:
    pool = load_pool("sim-composed-v2", [builtin_pool_dir()]).sample(4, seed=5, permute=True)
    shuffled = subpools.shuffled_descriptions(pool, "t1")
    assert subpools.worker_order(shuffled) == subpools.worker_order(pool)
    assert shuffled.visible_ids() == pool.visible_ids()
    assert all(a.description != b.description for a, b in zip(pool.workers, shuffled.workers, strict=True))
    assert sorted(w.description for w in shuffled.workers) == sorted(w.description for w in pool.workers)


def test_a_malformed_policy_row_is_a_malformed_signature() -> None:
    pool = load_pool("sim-composed", [builtin_pool_dir()]).sample(4, seed=3, permute=True)
    assert decisions.completion_workflow("hello", pool, {}) == "hello"
    assert judge.row("x", {"id": "t"}, pool, judge.Outcome(0.0, False), None)["signature"] == "malformed"


def test_a_saved_adapter_names_its_base_model_without_the_home_folder(tmp_path: Path) -> None:
    """PEFT writes the resolved path (/root/... or /home/NAME/...) into adapter_config.json, which gets committed."""
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(Path.home() / ".cache/models/gemma"), "r": 16})
    )
    card.name_base_model_portably(tmp_path, str(Path.home() / ".cache/models/gemma"))
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config == {"base_model_name_or_path": "~/.cache/models/gemma", "r": 16}
