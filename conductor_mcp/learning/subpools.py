"""Sub-pools a conductor trains and is evaluated on: random k-of-n, with permuted ids when asked, and held-out
ones that no training question drew (so the policy cannot have remembered who is behind an id)."""

from __future__ import annotations

import argparse
from typing import Any

from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError


def training_pool(args: argparse.Namespace, pool: Pool, i: int) -> Pool:
    """The sub-pool of training row i (the whole pool without --subpool-k)."""
    if not args.subpool_k:
        return pool
    seed: int | str = f"train:{args.seed}:{i}" if args.permute_ids else args.seed * 100_003 + i
    return pool.sample(args.subpool_k, seed=seed, permute=args.permute_ids)


def training_pools(args: argparse.Namespace, pool: Pool, count: int) -> list[Pool]:
    """Every sub-pool a run can train on: one per GRPO row (steps x questions) and per warm-start row (one per
    simulated training task), or the first `count` rows if there are more."""
    return [training_pool(args, pool, i) for i in range(max(count, args.steps * args.questions, args.sim_tasks or 0))]


def held_out_pool(args: argparse.Namespace, pool: Pool, task: dict[str, Any], avoid: set[tuple[str, ...]]) -> Pool:
    """A held-out task's sub-pool: seeded by the task, redrawn until its worker order is not one in `avoid`."""
    if not args.subpool_k:
        return pool
    for attempt in range(1000):
        sub = pool.sample(args.subpool_k, seed=f"held-out:{args.seed}:{task['id']}:{attempt}", permute=args.permute_ids)
        if worker_order(sub) not in avoid:
            return sub
    raise RequestError(f"no {args.subpool_k}-worker sub-pool of {pool.name!r} is left that training never drew")


def worker_order(pool: Pool) -> tuple[str, ...]:
    """Who is behind each visible id: the pool's worker ids in the order the conductor sees them."""
    return tuple(w.id for w in pool.workers)
