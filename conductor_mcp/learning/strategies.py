"""Strategies compared by tools/evaluate.py: the conductor against the baselines it must beat, on one pool.

Every strategy is a workflow run through the same engine (so tokens, cost, calls and time are counted the
same way); the baselines are fixed workflows, the conductor's are its own.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_mcp.core.pool import Pool
from conductor_mcp.core.workflow import Step, Workflow

SOLVE = "Solve the task and state the final answer."
AGGREGATE = (
    "You see several candidate answers to the task. Weigh them critically, synthesise one correct and complete "
    "answer, and state the final answer."
)


@dataclass(frozen=True)
class Strategy:
    """How one strategy runs a task: a fixed workflow, or the conductor (max_steps / self_correct)."""

    name: str
    workflow: Workflow | None = None
    max_steps: int | None = None
    self_correct: bool = False
    written: dict[str, dict[str, Any]] | None = None  # task id -> a conductor's completion and its token counts


def written_by(name: str, path: Path) -> Strategy:
    """A conductor that ran elsewhere (a trained adapter's greedy workflows, tools/train_conductor.py's
    held_out_*.jsonl): its completion per task, run and scored like every other strategy."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return Strategy(name, written={row["task_id"]: row for row in rows})


def single(worker: str) -> Strategy:
    return Strategy(
        f"single:{worker}", Workflow(reasoning="baseline: one worker", steps=[Step(worker=worker, instruction=SOLVE)])
    )


def mixture_of_agents(pool: Pool, layers: int = 1, aggregator: str | None = None) -> Strategy:
    """Every worker proposes; in each further layer every worker sees the previous layer; one aggregates."""
    ids = pool.visible_ids()
    steps: list[Step] = []
    previous: list[int] = []
    for layer in range(layers):
        current = []
        for worker in ids:
            instruction = SOLVE if layer == 0 else AGGREGATE
            steps.append(Step(worker=worker, instruction=instruction, access=list(previous)))
            current.append(len(steps) - 1)
        previous = current
    final = aggregator or pool.default_visible_id()
    steps.append(Step(worker=final, instruction=AGGREGATE, access=previous))
    return Strategy(f"moa:{layers}-layer", Workflow(reasoning="baseline: mixture of agents", steps=steps))


def pipeline(planner: str, solver: str, verifier: str) -> Strategy:
    """The hand-written planner -> solver -> verifier chain."""
    return Strategy(
        "pipeline",
        Workflow(
            reasoning="baseline: planner, solver, verifier",
            steps=[
                Step(
                    worker=planner,
                    instruction="Break the task into steps and outline how to solve it. Do not solve it.",
                ),
                Step(
                    worker=solver, instruction="Follow the plan and solve the task. State the final answer.", access=[0]
                ),
                Step(
                    worker=verifier,
                    instruction="Check the solution step by step, fix any error, and state the final answer.",
                    access=[0, 1],
                ),
            ],
        ),
    )


def router() -> Strategy:
    """The conductor picks one worker (a one-step workflow)."""
    return Strategy("router", max_steps=1)


def conductor(recursive: bool = False) -> Strategy:
    return Strategy("conductor+recursion" if recursive else "conductor", self_correct=recursive)


def all_strategies(pool: Pool, moa_layers: int = 1) -> list[Strategy]:
    default = pool.default_visible_id()
    return [
        *(single(worker) for worker in pool.visible_ids()),
        mixture_of_agents(pool, moa_layers),
        pipeline(default, default, default),
        router(),
        conductor(False),
        conductor(True),
    ]


# --------------------------------------------------------------------------------------------------- metrics


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% confidence interval of a proportion (Wilson score), sound for small n and extreme rates."""
    if n == 0:
        return 0.0, 0.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(wins: int, losses: int) -> float:
    """Two-sided exact McNemar p-value: how likely a split of the discordant tasks at least this uneven is when
    neither strategy is better (a fair coin over wins + losses tasks)."""
    n = wins + losses
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(rows: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    """One strategy against another on the tasks both ran: the tasks only it got right (wins), only the other got
    right (losses), and the exact McNemar p-value. Pairing removes the tasks' own spread of difficulty, which makes
    two accuracy intervals on the same tasks overlap even when one strategy is better."""
    other = {r["task_id"]: r["correct"] for r in baseline}
    pairs = [(r["correct"], other[r["task_id"]]) for r in rows if r["task_id"] in other]
    wins = sum(mine and not theirs for mine, theirs in pairs)
    losses = sum(theirs and not mine for mine, theirs in pairs)
    return {"tasks": len(pairs), "wins": wins, "losses": losses, "p_value": mcnemar_exact(wins, losses)}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Metrics of one strategy from its per-task result rows."""
    n = len(rows)
    correct = sum(r["correct"] for r in rows)
    low, high = wilson_interval(correct, n)
    mean = (lambda key: sum(r[key] for r in rows) / n) if n else (lambda key: 0.0)
    return {
        "tasks": n,
        "accuracy": correct / n if n else 0.0,
        "ci_low": low,
        "ci_high": high,
        "tokens_per_task": mean("tokens"),
        "usd_per_task": mean("cost_usd"),
        "usd_total": sum(r["cost_usd"] for r in rows),
        "calls_per_task": mean("calls"),
        "steps_per_task": mean("steps"),
        "wall_s_per_task": mean("wall_s"),
        "failed_runs": sum(r["status"] != "done" for r in rows),
    }
