"""Evaluate the conductor against the baselines on one pool and one task set, in one command.

Strategies: each single worker alone; Mixture-of-Agents (all workers propose, one aggregates); a fixed
planner -> solver -> verifier pipeline; a router (the conductor picks one worker); the conductor's own
workflows, with and without recursion (one self-check). Results are cached per (strategy, task) in
OUT/cache.jsonl, so an interrupted evaluation continues where it stopped. Writes OUT/results.json,
OUT/results.md, OUT/accuracy_vs_cost.png and OUT/steps_by_domain.png.

    python tools/evaluate.py --pool sim --sim-tasks 200 --seed 0 --out eval-out
    python tools/evaluate.py --pool frontier --dataset gpqa.jsonl --out eval-gpqa --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from conductor_mcp.config import Settings
from conductor_mcp.core.pool import Pool
from conductor_mcp.core.records import Run
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.workflow import parse_workflow, validate_workflow
from conductor_mcp.errors import RequestError, WorkflowError
from conductor_mcp.learning import datasets
from conductor_mcp.learning.code_checks import code_sandbox_problem
from conductor_mcp.learning.sim_tasks import SIM_SETS
from conductor_mcp.learning.strategies import Strategy, all_strategies, paired, summarise, written_by
from conductor_mcp.learning.verifiers import verify
from conductor_mcp.service.service import Service


def load_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    tasks = SIM_SETS[args.sim_set](args.sim_tasks, args.seed) if args.sim_tasks else datasets.load(args.dataset)
    return tasks[: args.limit] if args.limit else tasks


async def run_one(
    service: Service, pool: Pool, strategy: Strategy, task: dict[str, Any], allow_unsafe_local_exec: bool = False
) -> dict[str, Any]:
    workflow, conductor = strategy.workflow, _written_usage(pool, strategy, task)
    if strategy.written is not None:
        try:
            text = strategy.written[task["id"]]["completion"]
            workflow, _ = validate_workflow(parse_workflow(text), pool.offered_ids(), pool.max_steps)
        except (KeyError, WorkflowError):  # no completion for the task, or none the server could run: wrong
            return _row(strategy, task, False, "malformed", None, conductor)
    fixed_length = len(workflow.steps) if workflow else None  # a baseline may exceed the pool's step limit
    request = RunRequest.of(
        task=task["question"],
        pool=pool.name,
        max_steps=strategy.max_steps or fixed_length,
        metadata=datasets.metadata(task),
        self_correct=strategy.self_correct,
    )
    run = service.start(request, workflow=workflow)
    run = await service.wait(run.id, None, cancel_on_exit=True)
    correct = await asyncio.to_thread(verify, task, run.answer, allow_unsafe_local_exec)  # code runs in a sandbox
    return _row(strategy, task, bool(correct), run.status, run, conductor)


def _written_usage(pool: Pool, strategy: Strategy, task: dict[str, Any]) -> tuple[int, float]:
    """The tokens and cost of a conductor that wrote its completion elsewhere, at the pool's conductor price."""
    row = (strategy.written or {}).get(task["id"])
    if not row:
        return 0, 0.0
    price, tokens = pool.conductor.price, row["prompt_tokens"] + row["completion_tokens"]
    if price is None:
        return tokens, 0.0
    return tokens, (
        row["prompt_tokens"] * price.input_per_mtok + row["completion_tokens"] * price.output_per_mtok
    ) / 1e6


def _row(
    strategy: Strategy, task: dict[str, Any], correct: bool, status: str, run: Run | None, conductor: tuple[int, float]
) -> dict[str, Any]:
    totals = run.totals if run else None
    return {
        "strategy": strategy.name,
        "task_id": task["id"],
        "domain": task.get("domain", "general"),
        "correct": correct,
        "status": status,
        "run_id": run.id if run else None,
        "tokens": (totals.total_tokens if totals else 0) + conductor[0],
        "cost_usd": (totals.cost_usd if totals else 0.0) + conductor[1],
        "calls": totals.calls if totals else 0,
        "steps": totals.steps if totals else 0,
        "wall_s": totals.wall_s if totals else 0.0,
    }


def write_report(out: Path, rows: list[dict[str, Any]], order: list[str], pool: str, source: str) -> dict[str, Any]:
    by_strategy: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: r["task_id"]):  # a fixed order: float sums do not depend on timing
        by_strategy[row["strategy"]].append(row)
    summary = {name: summarise(by_strategy[name]) for name in order if by_strategy[name]}
    moa = next((s for s in summary if s.startswith("moa")), None)
    for m in summary.values():  # every strategy's tokens against Mixture-of-Agents', side by side
        m["tokens_vs_moa"] = m["tokens_per_task"] / summary[moa]["tokens_per_task"] if moa else None
    ratio = summary["conductor"]["tokens_vs_moa"] if "conductor" in summary else None
    best = max((n for n in summary if n.startswith("single:")), key=lambda n: summary[n]["accuracy"], default=None)
    for name, m in summary.items():
        m["vs_best_single"] = None if best in (None, name) else paired(by_strategy[name], by_strategy[best])
    report = {
        "pool": pool,
        "tasks": source,
        "strategies": summary,
        "conductor_vs_moa_tokens": ratio,
        "best_single": best,
    }
    (out / "results.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"Pool `{pool}`, tasks `{source}`.",
        "",
        "| strategy | accuracy | 95% CI | tokens/task | tokens vs MoA | USD/task | calls/task | steps/task | s/task "
        "| failed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in summary.items():
        versus = f"{m['tokens_vs_moa']:.3f}" if m["tokens_vs_moa"] is not None else "-"
        lines.append(
            f"| {name} | {m['accuracy']:.3f} | {m['ci_low']:.3f}-{m['ci_high']:.3f} | {m['tokens_per_task']:.0f} | "
            f"{versus} | {m['usd_per_task']:.5f} | {m['calls_per_task']:.2f} | {m['steps_per_task']:.2f} | "
            f"{m['wall_s_per_task']:.2f} | {m['failed_runs']} |"
        )
    if ratio is not None:
        lines += [
            "",
            f"Conductor tokens per task / Mixture-of-Agents tokens per task: **{ratio:.3f}** (1/{1 / ratio:.1f}).",
        ]
    if best is not None:
        lines += _paired_table(summary, best)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot(out, summary, by_strategy)
    return report


def _paired_table(summary: dict[str, Any], best: str) -> list[str]:
    lines = [
        "",
        f"Each strategy against the best single worker (`{best}`) on the same tasks: tasks only it got right, only "
        f"`{best}` got right, and the exact McNemar p-value (two-sided).",
        "",
        "| strategy | only it right | only the best single right | p |",
        "|---|---|---|---|",
    ]
    for name, m in summary.items():
        if (versus := m["vs_best_single"]) is not None and not name.startswith("single:"):
            lines.append(f"| {name} | {versus['wins']} | {versus['losses']} | {versus['p_value']:.2g} |")
    return lines


def plot(out: Path, summary: dict[str, Any], by_strategy: dict[str, list[dict[str, Any]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, m in summary.items():
        error = [[m["accuracy"] - m["ci_low"]], [m["ci_high"] - m["accuracy"]]]
        ax.errorbar(m["usd_per_task"], m["accuracy"], yerr=error, fmt="o", capsize=3)
        ax.annotate(name, (m["usd_per_task"], m["accuracy"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("USD per task")
    ax.set_ylabel("accuracy (95% CI)")
    ax.set_title("Accuracy against cost")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_cost.png", dpi=120)
    plt.close(fig)

    domains = sorted({r["domain"] for rows in by_strategy.values() for r in rows})
    names = [n for n in summary if not n.startswith("single:")]
    fig, ax = plt.subplots(figsize=(8, 5))
    width = 0.8 / max(1, len(names))
    for k, name in enumerate(names):
        means = []
        for domain in domains:
            steps = [r["steps"] for r in by_strategy[name] if r["domain"] == domain]
            means.append(sum(steps) / len(steps) if steps else 0.0)
        ax.bar([d + k * width for d in range(len(domains))], means, width, label=name)
    ax.set_xticks([d + width * (len(names) - 1) / 2 for d in range(len(domains))], domains)
    ax.set_ylabel("steps per task")
    ax.set_title("Steps per task by domain")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "steps_by_domain.png", dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pool", default="sim")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help="JSONL task file (see conductor_mcp/learning/datasets.py) or bundled:smoke")
    source.add_argument("--sim-tasks", type=int, help="generate this many simulator tasks")
    parser.add_argument(
        "--sim-set",
        choices=sorted(SIM_SETS),
        default="plain",
        help="structured: the testbed's tasks (pool sim-structured)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="only the first N tasks")
    parser.add_argument("--strategies", help="comma-separated names to run (default: all)")
    parser.add_argument("--moa-layers", type=int, default=1)
    parser.add_argument(
        "--workflows",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="completions per task (a training run's held_out_*.jsonl), scored as NAME",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("eval-out"))
    parser.add_argument(
        "--unsafe-local-exec",
        action="store_true",
        help="where bubblewrap is missing, run code tasks' code unsandboxed (docs: Budgets, failures and security)",
    )
    return parser.parse_args(argv)


def chosen_strategies(pool: Pool, args: argparse.Namespace) -> list[Strategy]:
    written = []
    for entry in args.workflows:
        name, sep, path = entry.partition("=")
        if not sep or not Path(path).is_file():
            raise RequestError(f"--workflows takes NAME=FILE with an existing file, got {entry!r}")
        written.append(written_by(name, Path(path)))
    strategies = written + all_strategies(pool, args.moa_layers)
    if not args.strategies:
        return strategies
    wanted = args.strategies.split(",")
    unknown = set(wanted) - {s.name for s in strategies}
    if unknown:
        raise RequestError(f"--strategies: unknown {sorted(unknown)}; known: {[s.name for s in strategies]}")
    return [s for s in strategies if s.name in wanted]


async def run_jobs(
    service: Service, pool: Pool, jobs: list[tuple[Strategy, dict[str, Any]]], args: argparse.Namespace, cache: Path
) -> list[dict[str, Any]]:
    """Run the (strategy, task) jobs, args.concurrency at a time; each row is appended to `cache` the moment it
    exists, so a stopped evaluation resumes from there."""
    limit = asyncio.Semaphore(args.concurrency)
    rows = []

    async def job(strategy: Strategy, task: dict[str, Any]) -> dict[str, Any]:
        async with limit:
            return await run_one(service, pool, strategy, task, args.unsafe_local_exec)

    with cache.open("a") as sink, tqdm(total=len(jobs), desc="evaluating", file=sys.stderr, disable=not jobs) as bar:
        for finished in asyncio.as_completed([job(s, t) for s, t in jobs]):
            row = await finished
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            rows.append(row)
            bar.update()
    return rows


async def evaluate(args: argparse.Namespace) -> str:
    """Run every chosen strategy on every task (resuming from OUT/cache.jsonl); returns the markdown report."""
    tasks = load_tasks(args)
    problem = code_sandbox_problem(tasks, args.unsafe_local_exec)
    if problem:  # before any worker is paid for answers that could not be scored
        raise RequestError(problem)
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.out / "cache.jsonl"
    rows = [json.loads(line) for line in cache.read_text().splitlines()] if cache.exists() else []
    async with Service.open(Settings.from_env(state_dir=args.out / "state")) as service:
        pool = service.pools.for_request(args.pool)
        strategies = chosen_strategies(pool, args)
        done = {(r["strategy"], r["task_id"]) for r in rows}
        jobs = [(s, t) for s in strategies for t in tasks if (s.name, t["id"]) not in done]
        rows += await run_jobs(service, pool, jobs, args, cache)
    task_ids = {t["id"] for t in tasks}
    rows = [r for r in rows if r["task_id"] in task_ids and r["strategy"] in {s.name for s in strategies}]
    label = args.dataset or f"simulated x{args.sim_tasks} (seed {args.seed})"
    write_report(args.out, rows, [s.name for s in strategies], pool.name, label)
    return (args.out / "results.md").read_text()
