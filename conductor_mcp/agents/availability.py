"""Which workers that work in a workspace cannot run on this machine, and why: what `doctor` and `pools` say, and
what the conductor should not be offered."""

from __future__ import annotations

from conductor_mcp.agents.runner import unavailable_reason as agent_problem
from conductor_mcp.core.pool import Pool, WorkerSpec
from conductor_mcp.runtime import sandbox as isolation


def unavailable_reason(worker: WorkerSpec) -> str | None:
    """Why this worker cannot run here (None when it can, or when it needs nothing beyond its model)."""
    if worker.agent is not None:
        return agent_problem(worker)
    if "run" in worker.tools:
        bwrap = isolation.bwrap_path()
        problem = (
            "bubblewrap is not installed (apt-get install bubblewrap)" if bwrap is None else isolation.probe(bwrap)
        )
        if problem is not None:
            return f"worker {worker.id!r}: its run tool needs bubblewrap: {problem}"
    return None


def unavailable_workers(pool: Pool) -> dict[str, str]:
    """Worker id -> why it cannot run here, for the pool's agents and tool-using workers."""
    found = {worker.id: unavailable_reason(worker) for worker in pool.workers if worker.needs_workspace()}
    return {worker_id: reason for worker_id, reason in found.items() if reason is not None}
