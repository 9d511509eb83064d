"""Run the judgement of a training run (tools/judge_learning.py): every strategy of learning/comparison.py on the run's
held-out tasks and sub-pools, the oracles chosen on training tasks, the paired tests; judged.json and judged.md.

    python tools/judge_learning.py --run tools/results/grpo-cpu-sim-composed
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from conductor_mcp.config import Settings, builtin_pool_dir
from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import card, comparison, decisions, gate, subpools
from conductor_mcp.learning.rewards import Outcome, WorkflowReward
from conductor_mcp.learning.sim_tasks import SIM_SETS, held_out_set, rules_of
from conductor_mcp.service.catalogue import load_pool
from conductor_mcp.service.service import Service

MAX_STEPS = 5  # Mixture-of-Agents on a 4-worker sub-pool: four proposals and the aggregator
BASELINES: dict[str, comparison.Build] = {
    "router": comparison.scripted(1, True),
    "router (no pitfall)": comparison.scripted(1, False),
    "scripted conductor": comparison.scripted(3, True),
    "scripted conductor (no pitfall)": comparison.scripted(3, False),
    "moa (pitfall named)": comparison.moa(True),
    "moa": comparison.moa(False),
}
POLICIES = {
    "trained": "held_out_after.jsonl",
    "warm start": "held_out_after_sft.jsonl",
    # the trained policy's completions on the same sub-pools with their descriptions shuffled among the workers
    # (subpools.shuffled_descriptions, seeded by the task id): the ablation that shows whether it reads them
    "trained (descriptions shuffled)": "held_out_after_shuffled.jsonl",
}
FIXED = "best fixed completion"
SHUFFLED_SCRIPT = "scripted conductor (descriptions shuffled)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Judge a training run: trained vs warm start, baselines, oracles.")
    parser.add_argument("--run", type=Path, required=True, help="a tools/train_conductor.py --out folder")
    parser.add_argument("--oracle-tasks", type=int, default=512, help="training tasks the oracles choose on")
    parser.add_argument("--concurrency", type=int, default=8)
    again = parser.add_argument_group(
        "re-judging on another pool (learning/rejudge.py; needs the train extra to run the committed adapters)"
    )
    again.add_argument("--pool", type=Path, help="a pool file of simulated workers to draw the held-out sub-pools from")
    again.add_argument("--out", type=Path, help="where the re-judgement goes (not the run's own folder)")
    again.add_argument("--base-model", help="the base model the adapters were trained on (default: the recipe's)")
    again.add_argument("--eval-tasks", type=int, help="the first N of the run's held-out tasks (default: all)")
    args = parser.parse_args(argv)
    if (args.out is not None or args.base_model or args.eval_tasks) and args.pool is None:
        parser.error("--out, --base-model and --eval-tasks re-judge on another pool: give --pool FILE")
    if args.pool is not None and args.out is None:
        parser.error("--pool needs --out DIR: a re-judgement never writes into the run it judges")
    return args


def run_recipe(run: Path) -> argparse.Namespace:
    """A run's options: from its card once it is finished, from recipe.json while it trains."""
    card_file = run / "card.json"
    if card_file.exists():
        return argparse.Namespace(**json.loads(card_file.read_text())["recipe"])
    if not (run / "recipe.json").exists():
        raise RequestError(f"{run}: neither card.json nor recipe.json: not a tools/train_conductor.py --out folder")
    return argparse.Namespace(**json.loads((run / "recipe.json").read_text()))


def held_out_pools(recipe: argparse.Namespace, pool: Pool, tasks: list[dict[str, Any]]) -> list[Pool]:
    """The sub-pools the run's held-out evaluation drew (learning/subpools.py), one per task."""
    avoid = {subpools.worker_order(p) for p in subpools.training_pools(recipe, pool, 0)} if recipe.subpool_k else set()
    return [subpools.held_out_pool(recipe, pool, task, avoid) for task in tasks]


def row(name: str, task: dict[str, Any], pool: Pool, outcome: Outcome, workflow: dict[str, Any] | None) -> dict:
    return {
        "strategy": name,
        "task_id": task["id"],
        "difficulty": task.get("difficulty"),
        "correct": outcome.correct,
        "reward": outcome.reward,
        "well_formed": outcome.well_formed,
        "tokens": outcome.tokens,
        "cost_usd": outcome.cost_usd,
        "steps": outcome.steps,
        "signature": decisions.signature(pool, workflow) if workflow else "malformed",
        "decisions": decisions.signature(pool, workflow, real_ids=False) if workflow else "malformed",
        "specialist_first": comparison.specialist_first(pool, task, workflow),
    }


class Scoring:
    """Scores (task, sub-pool, workflow) jobs with the training reward, `concurrency` at a time, each outcome kept
    in RUN/judge-cache.jsonl: the simulator is deterministic in its prompts, so a kept outcome is the outcome, and
    the baselines and oracles can be judged while the policy still trains."""

    def __init__(self, reward: WorkflowReward, concurrency: int, cache: Path) -> None:
        self.reward, self.limit, self.cache = reward, asyncio.Semaphore(concurrency), cache
        lines = cache.read_text().splitlines() if cache.exists() else []
        self.kept = {entry["key"]: Outcome(**entry["outcome"]) for entry in map(json.loads, lines)}

    async def __call__(self, jobs: list[tuple[str, dict[str, Any], Pool, str]]) -> list[Outcome]:
        return list(await asyncio.gather(*(self.one(text, task, pool) for _, task, pool, text in jobs)))

    async def one(self, text: str, task: dict[str, Any], pool: Pool) -> Outcome:
        key = "\x1f".join([task["id"], *subpools.worker_order(pool), hashlib.sha256(text.encode()).hexdigest()])
        if key not in self.kept:
            async with self.limit:
                self.kept[key] = await self.reward.score(text, task, pool)
            with self.cache.open("a") as sink:
                sink.write(json.dumps({"key": key, "outcome": dataclasses.asdict(self.kept[key])}) + "\n")
        return self.kept[key]


async def judge(args: argparse.Namespace) -> dict[str, Any]:
    """The judgement of the run in args.run: of its policies' held-out files where they exist (the baselines and
    oracles alone, from its recipe.json, while it still trains)."""
    card_file = args.run / "card.json"
    recipe = run_recipe(args.run)
    pool = load_pool(recipe.pool, [builtin_pool_dir()])
    tasks = held_out_set(recipe.sim_set, recipe.eval_tasks, recipe.seed, recipe.sim_domains)
    written = {name: _rows(args.run / file) for name, file in POLICIES.items() if (args.run / file).exists()}
    pools = held_out_pools(recipe, pool, tasks)
    orders = [list(subpools.worker_order(p)) for p in pools]
    for rows in written.values():  # the policy was evaluated on exactly these sub-pools
        if any(rows[t["id"]]["pool_workers"] != order for t, order in zip(tasks, orders, strict=True)):
            raise RequestError(f"{args.run}: held-out sub-pools differ from the ones its recipe draws")
    settings = Settings.from_env(state_dir=args.run / "judge-state", sim_time_scale=0.0)
    async with Service.open(settings) as service:
        scale = rules_of(recipe.sim_set).cost_scale_usd
        reward = WorkflowReward(service, MAX_STEPS, cost_weight=recipe.cost_weight, cost_scale_usd=scale)
        run = Scoring(reward, args.concurrency, args.run / "judge-cache.jsonl")
        oracle = await choose_oracles(run, recipe, pool, args.oracle_tasks)
        fixed = best_fixed(recipe, pool, args.oracle_tasks)
        rows = await held_out_rows(run, written, tasks, pools, oracle, fixed)
    if recipe.completion == "assessed":
        add_assessments(rows, written)
    report = comparison.report(rows, oracle, recipe.cost_weight) | {"best_fixed_completion": fixed}
    if card_file.exists():
        trained = json.loads(card_file.read_text())
        report["diagnosis"] = comparison.diagnosis(trained)
        if trained.get("rollouts"):
            card.plot_rollouts(trained["rollouts"], args.run / "rollouts.png")
    with (args.run / "judged-rows.jsonl").open("w") as sink:
        sink.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    (args.run / "judged.json").write_text(json.dumps(report, indent=2))
    (args.run / "judged.md").write_text(comparison.markdown(report))
    return report


async def choose_oracles(run: Scoring, recipe: argparse.Namespace, pool: Pool, n: int) -> dict[str, Any]:
    """Each pattern on `n` training tasks and their training sub-pools; per class, the best pattern by reward and
    by accuracy (what an oracle that knows the rules and the odds would play)."""
    tasks = SIM_SETS[recipe.sim_set](n, recipe.seed, recipe.sim_domains)
    pools = [subpools.training_pool(recipe, pool, i, task) for i, task in enumerate(tasks)]
    scored: dict[str, list[dict[str, Any]]] = {}
    for name in comparison.PATTERNS:
        build = comparison.pattern(name)
        flows = [build(p, t) for p, t in zip(pools, tasks, strict=True)]
        jobs = [(name, t, p, json.dumps(f)) for t, p, f in zip(tasks, pools, flows, strict=True)]
        outcomes = await run(jobs)
        scored[name] = [{"reward": o.reward, "correct": o.correct} for o in outcomes]
    classes = [comparison.task_class(p, t) for p, t in zip(pools, tasks, strict=True)]
    return {
        "reward": comparison.oracle_choice(scored, classes, "reward"),
        "accuracy": comparison.oracle_choice(scored, classes, "correct"),
    }


def best_fixed(recipe: argparse.Namespace, pool: Pool, n: int) -> str:
    """The input-independent completion (one per repetition pattern and flags, learning/gate.py) with the best mean
    reward on `n` training tasks and their training sub-pools, scored in-process (learning/sim_outcomes.py)."""
    tasks = SIM_SETS[recipe.sim_set](n, recipe.seed, recipe.sim_domains)
    jobs = [(t, subpools.training_pool(recipe, pool, i, t)) for i, t in enumerate(tasks)]
    score = gate.scorer(recipe, MAX_STEPS)
    fixed = gate.fixed_completions(recipe.subpool_k or len(pool.workers))
    return max(fixed, key=lambda text: (gate.mean_reward(score, [text] * len(jobs), jobs), -fixed.index(text)))


async def held_out_rows(
    run: Scoring,
    written: dict[str, dict[str, dict[str, Any]]],
    tasks: list[dict[str, Any]],
    pools: list[Pool],
    oracle: dict[str, Any],
    fixed: str,
) -> list[dict[str, Any]]:
    """Every strategy's row on every held-out task, on that task's sub-pool."""
    strategies: dict[str, list[str]] = {name: [w[t["id"]]["completion"] for t in tasks] for name, w in written.items()}
    for name, build in BASELINES.items():
        strategies[name] = [json.dumps(build(p, t)) for p, t in zip(pools, tasks, strict=True)]
    strategies[FIXED] = [decisions.completion_workflow(fixed, p, t) for p, t in zip(pools, tasks, strict=True)]
    shuffled = [subpools.shuffled_descriptions(p, t["id"]) for p, t in zip(pools, tasks, strict=True)]
    script = BASELINES["scripted conductor"]
    strategies[SHUFFLED_SCRIPT] = [json.dumps(script(s, t)) for s, t in zip(shuffled, tasks, strict=True)]
    for name in comparison.PATTERNS:
        strategies[f"pattern {name}"] = [
            json.dumps(comparison.pattern(name)(p, t)) for p, t in zip(pools, tasks, strict=True)
        ]
    for key in ("reward", "accuracy"):
        chosen = [comparison.oracle_play(oracle[key], p, t) for p, t in zip(pools, tasks, strict=True)]
        strategies[f"oracle (max {key})"] = [
            json.dumps(comparison.pattern(c)(p, t)) for c, p, t in zip(chosen, pools, tasks, strict=True)
        ]
    rows = []
    for name, texts in strategies.items():
        outcomes = await run([(name, t, p, text) for t, p, text in zip(tasks, pools, texts, strict=True)])
        for task, sub, text, outcome in zip(tasks, pools, texts, outcomes, strict=True):
            rows.append(row(name, task, sub, outcome, _workflow(text)))
    return rows


def add_assessments(rows: list[dict[str, Any]], written: dict[str, dict[str, dict[str, Any]]]) -> None:
    """On a run in the assessed encoding, each policy row gets the difficulty the policy wrote (None: a completion
    that does not start with one), beside the task's own."""
    for r in rows:
        if r["strategy"] in written:
            found = decisions.assessment(written[r["strategy"]][r["task_id"]]["written"])
            r["assessed"] = found[0] if found else None


def _workflow(text: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["task_id"]: r for r in (json.loads(line) for line in path.read_text().splitlines() if line.strip())}
