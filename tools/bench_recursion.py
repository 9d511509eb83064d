"""Recursive test-time scaling on the simulator: accuracy, tokens and calls with and without recursion.

The same task set runs twice through the real engine on the `sim` pool, side by side:
  plain      the conductor's workflow as written;
  recursive  the conductor offered as a worker, and one self-check at the end (self_correct).

    python tools/bench_recursion.py [--tasks 200] [--seed 0] [--concurrency 16]
"""

from __future__ import annotations

from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before the imports below load litellm

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from conductor_mcp.config import Settings, builtin_pool_dir
from conductor_mcp.core.request import RunRequest
from conductor_mcp.learning.sim_tasks import task_set
from conductor_mcp.learning.strategies import wilson_interval
from conductor_mcp.models.sim import final_answer
from conductor_mcp.runtime.logs import configure_logging
from conductor_mcp.service.service import Service


async def run_all(service: Service, pool: str, tasks: list[dict[str, Any]], concurrency: int) -> dict[str, float]:
    limit = asyncio.Semaphore(concurrency)

    async def one(task: dict[str, Any]) -> tuple[bool, int, int, int]:
        async with limit:
            run = await service.orchestrate(RunRequest.of(task=task["question"], pool=pool, metadata=task))
        correct = final_answer(run.answer) == task["answer"]
        return correct, run.totals.total_tokens, run.totals.calls, sum(1 for s in run.steps if s.depth > 0)

    results = await asyncio.gather(*(one(t) for t in tasks))
    n = len(results)
    correct = sum(r[0] for r in results)
    low, high = wilson_interval(correct, n)
    return {
        "accuracy": correct / n,
        "ci_low": low,
        "ci_high": high,
        "tokens": sum(r[1] for r in results) / n,
        "calls": sum(r[2] for r in results) / n,
        "nested_steps": sum(r[3] for r in results) / n,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    configure_logging("error")
    tasks = task_set(args.tasks, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        pools = Path(tmp) / "pools"
        pools.mkdir()
        doc = yaml.safe_load((builtin_pool_dir() / "sim.yaml").read_text())
        (pools / "sim-recursive.yaml").write_text(
            yaml.safe_dump({**doc, "name": "sim-recursive", "recursion": True, "self_correct": True})
        )
        settings = Settings.from_env(state_dir=Path(tmp) / "state", pool_path=(pools,), sim_time_scale=0.0)
        async with Service.open(settings) as service:
            plain = await run_all(service, "sim", tasks, args.concurrency)
            recursive = await run_all(service, "sim-recursive", tasks, args.concurrency)
    print(f"{args.tasks} simulated tasks (seed {args.seed}), sim pool, one run each")
    print(f"{'':<22}{'plain':>16}{'recursive':>16}{'ratio':>10}")
    rows = [
        ("accuracy", "accuracy", "{:.3f}"),
        ("tokens / task", "tokens", "{:.0f}"),
        ("calls / task", "calls", "{:.2f}"),
        ("nested steps / task", "nested_steps", "{:.2f}"),
    ]
    for label, key, fmt in rows:
        ratio = recursive[key] / plain[key] if plain[key] else float("nan")
        print(f"{label:<22}{fmt.format(plain[key]):>16}{fmt.format(recursive[key]):>16}{ratio:>10.2f}")
    for name, result in (("plain", plain), ("recursive", recursive)):
        print(f"{name} accuracy 95% CI: [{result['ci_low']:.3f}, {result['ci_high']:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
