"""Which of a pool's workers one run may use: the caller's choice (`only`, `exclude`) and what its client offers.

A caller narrows the pool, never widens it (the operator's pool bounds what a client may ask). The narrowing is
done once, here, and the run records its result (`Run.worker_ids`): the service hands the conductor and the
executor a view of the pool that holds only the allowed workers, so the conductor's prompt shows no other and a
fallback cannot leave the set. A worker backed by the host's own model (`model: host`) is offered only when the
client that asked for the run answers sampling requests; otherwise the conductor is simply not shown it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from conductor_mcp.core.limits import MAX_CHOSEN
from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError

WorkerIds = Annotated[tuple[Annotated[str, Field(min_length=1, max_length=100)], ...], Field(max_length=MAX_CHOSEN)]


class WorkerChoice(BaseModel):
    """The caller's say in who works on its task, by pool id (the ids the `pools` tool lists)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    only: WorkerIds | None = Field(default=None, description="Pool ids of the only workers the run may use.")
    exclude: WorkerIds = Field(default=(), description="Pool ids of workers the run must not use.")

    def describe(self) -> str:
        """The choice as a transcript shows it."""
        parts = [f"only {', '.join(self.only)}"] if self.only is not None else []
        return "; ".join([*parts, *([f"exclude {', '.join(self.exclude)}"] if self.exclude else [])]) or "all"


def allowed_ids(pool: Pool, choice: WorkerChoice | None, host_offered: bool) -> list[str] | None:
    """The pool ids a run may use, in pool order; None when that is every worker (the pool is used as it is).

    A name that is not in the pool, or a choice that leaves no worker, is a RequestError naming it. Host workers
    drop out silently when the client cannot answer sampling, unless nothing else is left."""
    known = [worker.id for worker in pool.workers]
    only, exclude = (choice.only, choice.exclude) if choice is not None else (None, ())
    for field, ids in (("only", only or ()), ("exclude", exclude)):
        unknown = [worker_id for worker_id in ids if worker_id not in known]
        if unknown:
            raise RequestError(
                f"workers.{field}: {', '.join(map(repr, unknown))} not in pool {pool.name!r}; "
                f"its workers are {', '.join(known)}"
            )
    chosen = [worker_id for worker_id in known if (only is None or worker_id in only) and worker_id not in exclude]
    if not chosen:
        assert choice is not None  # a pool has at least one worker
        raise RequestError(
            f"workers: {choice.describe()} leaves no worker of pool {pool.name!r} (its workers: {', '.join(known)})"
        )
    offered = [worker_id for worker_id in chosen if host_offered or not pool.get(worker_id).is_host()]
    if not offered:
        raise RequestError(
            f"workers: only the host's model is left ({', '.join(chosen)}), and this client does not answer "
            "sampling requests (it declares no `sampling` capability, or its connection cannot carry them)"
        )
    return None if offered == known else offered


def pool_view(pool: Pool, worker_ids: list[str] | None) -> Pool:
    """The pool as one run sees it: only the workers it may use (None: all of them)."""
    if worker_ids is None:
        return pool
    missing = [worker_id for worker_id in worker_ids if worker_id not in {w.id for w in pool.workers}]
    if missing:
        raise RequestError(f"workers: pool {pool.name!r} no longer has {', '.join(missing)}, which this run used")
    return pool.only(worker_ids)
