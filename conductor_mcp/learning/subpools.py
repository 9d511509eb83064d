"""Sub-pools a conductor trains and is evaluated on: random k-of-n, with permuted ids when asked, and held-out
ones that no training question drew (so the policy cannot have remembered who is behind an id). Where the sim set
says so (sim_tasks.SetRules.specialist_share), a sub-pool holds the task's specialist with that chance, so that
reading the descriptions pays on most tasks."""

from __future__ import annotations

import argparse
import random
from typing import Any

from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import train_options
from conductor_mcp.learning.sim_tasks import rules_of
from conductor_mcp.models import sim_testbed as testbed


def training_pool(args: argparse.Namespace, pool: Pool, i: int, task: dict[str, Any]) -> Pool:
    """The sub-pool of training row i, whose task is `task` (the whole pool without --subpool-k)."""
    if not args.subpool_k:
        return pool
    seed: int | str = f"train:{args.seed}:{i}" if args.permute_ids else args.seed * 100_003 + i
    return _draw(args, pool, task, seed)


def training_pools(args: argparse.Namespace, pool: Pool, count: int) -> list[Pool]:
    """Every sub-pool a run can train on: one per GRPO row (steps x questions) and per warm-start row (one per
    simulated training task), or the first `count` rows if there are more; row i's task is task i mod n."""
    tasks = train_options.training_tasks(args)
    rows = max(count, args.steps * args.questions, args.sim_tasks or 0)
    return [training_pool(args, pool, i, tasks[i % len(tasks)]) for i in range(rows)]


def held_out_pool(args: argparse.Namespace, pool: Pool, task: dict[str, Any], avoid: set[tuple[str, ...]]) -> Pool:
    """A held-out task's sub-pool: seeded by the task, redrawn until its worker order is not one in `avoid`."""
    if not args.subpool_k:
        return pool
    for attempt in range(1000):
        sub = _draw(args, pool, task, f"held-out:{args.seed}:{task['id']}:{attempt}")
        if worker_order(sub) not in avoid:
            return sub
    raise RequestError(f"no {args.subpool_k}-worker sub-pool of {pool.name!r} is left that training never drew")


def worker_order(pool: Pool) -> tuple[str, ...]:
    """Who is behind each visible id: the pool's worker ids in the order the conductor sees them."""
    return tuple(w.id for w in pool.workers)


def specialist_of(pool: Pool, domain: str) -> str | None:
    """The worker whose description says it is strongest at the domain (what the scripted conductor reads)."""
    return next((w.id for w in pool.workers if f"{testbed.SPECIALIST_MARK}{domain}" in w.description.lower()), None)


def _draw(args: argparse.Namespace, pool: Pool, task: dict[str, Any], seed: int | str) -> Pool:
    """A k-of-n sub-pool from the seed: uniform, or (the set's specialist share) holding the task's specialist
    with that chance and otherwise not, the other workers uniform among the rest."""
    share = rules_of(getattr(args, "sim_set", None)).specialist_share
    specialist = specialist_of(pool, str(task.get("domain"))) if share is not None else None
    if share is None or specialist is None:
        return pool.sample(args.subpool_k, seed=seed, permute=args.permute_ids)
    rng = random.Random(f"{seed}:specialist")
    others = [w.id for w in pool.workers if w.id != specialist]
    present = rng.random() < share
    chosen = [*rng.sample(others, args.subpool_k - present), *([specialist] if present else [])]
    if args.permute_ids:
        rng.shuffle(chosen)
    name = f"{pool.name}[k={args.subpool_k},seed={seed},{'with' if present else 'without'} specialist]"
    return pool.only(chosen, name, given_order=args.permute_ids)


def shuffled_descriptions(pool: Pool, seed: str) -> Pool:
    """The sub-pool with its workers' descriptions shuffled among them, none left in place (the judge's ablation:
    a policy that reads descriptions is misled, one that ignores them is not); workers, order and ids unchanged."""
    texts = [w.description for w in pool.workers]
    rng, order = random.Random(f"shuffled:{seed}"), list(range(len(texts)))
    while len(order) > 1 and any(i == j for i, j in enumerate(order)):
        rng.shuffle(order)
    workers = [w.model_copy(update={"description": texts[j]}) for w, j in zip(pool.workers, order, strict=True)]
    return pool.model_copy(update={"name": f"{pool.name}[descriptions shuffled]", "workers": workers})
