"""Re-judge a committed run on another pool file (tools/judge_learning.py --run RUN --pool FILE --out DIR).

A run's judgement holds for the pool it trained on. Whether the policy reads descriptions or remembered the words
of one file shows on another: workers described otherwise, more or fewer of them, other prices. The run's committed
adapters (the trained one, and its warm start where kept) write their greedy workflows for the run's held-out tasks
on held-out sub-pools drawn from FILE, exactly as the run's own evaluation does (training.held_out_workflows), and the
judge scores them beside every baseline and oracle on those sub-pools. DIR gets what RUN has: held_out_*.jsonl,
recipe.json (the run's, with the pool replaced), judged.json, judged.md, judged-rows.jsonl and judge-cache.jsonl.

Running the policy needs the train extra (torch, transformers, peft); the pool file is checked before it loads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import card, judge, train_options, training
from conductor_mcp.models.sim import PREFIX as SIM_PREFIX
from conductor_mcp.service.catalogue import load_pool

# held-out file label -> (the run's adapter folder that writes it, whether it reads the descriptions shuffled)
POLICY_FILES = {
    "after": ("adapter", False),
    "after_shuffled": ("adapter", True),
    "after_sft": ("sft-adapter", False),
}


def rejudge(args: argparse.Namespace) -> dict[str, Any]:
    """Write the run's policies' held-out workflows on args.pool into args.out, then judge args.out."""
    if args.out.resolve() == args.run.resolve():
        raise RequestError(f"--out {args.out}: a re-judgement never writes into the run it judges")
    recipe = judge.run_recipe(args.run)
    pool = load_pool(str(args.pool), [builtin_pool_dir()])
    problem = pool_problem(pool, recipe)
    if problem:
        raise RequestError(f"{args.pool}: {problem}")
    adapters = {name: args.run / name for name, _ in POLICY_FILES.values() if (args.run / name).is_dir()}
    if not adapters:
        raise RequestError(f"{args.run}: no adapter/ or sft-adapter/ to run: commit the run's adapters first")
    recipe.pool, recipe.out = str(args.pool), str(args.out)
    recipe.eval_tasks = args.eval_tasks or recipe.eval_tasks
    base_model = os.path.expanduser(args.base_model or recipe.base_model)
    args.out.mkdir(parents=True, exist_ok=True)
    write_policy_files(recipe, base_model, pool, adapters, args.out)
    (args.out / "recipe.json").write_text(json.dumps(card.recipe(recipe), indent=2))
    again = argparse.Namespace(run=args.out, oracle_tasks=args.oracle_tasks, concurrency=args.concurrency)
    return asyncio.run(judge.judge(again))


def pool_problem(pool: Pool, recipe: argparse.Namespace) -> str | None:
    """Why the run's held-out tasks cannot be judged on this pool, if they cannot: the simulator answers simulated
    tasks, and a sub-pool needs as many workers as the run drew."""
    if not recipe.sim_set or recipe.eval_dataset:
        return "re-judging on another pool is for runs on simulated tasks (--sim-set); this run evaluated a dataset"
    real = [w.id for w in pool.workers if not w.model.startswith(SIM_PREFIX)]
    if real:
        return (
            f"workers {real} are not simulated ({SIM_PREFIX}...): the judge scores simulated tasks, which only the "
            "simulator answers"
        )
    if recipe.subpool_k and len(pool.workers) < recipe.subpool_k:
        return f"{len(pool.workers)} workers, fewer than the run's {recipe.subpool_k}-worker sub-pools"
    return None


def write_policy_files(
    recipe: argparse.Namespace, base_model: str, pool: Pool, adapters: dict[str, Path], out: Path
) -> None:
    """Each adapter's greedy workflows for the held-out tasks on `pool`, to OUT/held_out_<label>.jsonl."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        message = "re-judging runs the run's adapters: install the train extra (pip install -e '.[train]')"
        raise RequestError(message) from None
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    tasks = train_options.held_out_tasks(recipe)
    for name, folder in adapters.items():
        model = training.trained_adapter(base_model, folder)
        for label, (writer, shuffled) in POLICY_FILES.items():
            if writer == name:
                _, rows = training.held_out_workflows(recipe, model, tokenizer, pool, tasks, shuffled)
                training.write_rows(out / f"held_out_{label}.jsonl", rows)
