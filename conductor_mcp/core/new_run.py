"""A new run from a request on a pool: every limit the run keeps (steps, calls, depth, self-correction, the
workers the caller allowed) is fixed here, when it starts, so resuming it later cannot change them."""

from __future__ import annotations

from conductor_mcp.core.choice import allowed_ids, pool_view
from conductor_mcp.core.limits import max_calls
from conductor_mcp.core.pool import Pool
from conductor_mcp.core.records import Run, new_run_id
from conductor_mcp.core.request import RunRequest


def new_run(request: RunRequest, pool: Pool, pool_digest: str, sampling: bool) -> tuple[Run, Pool]:
    """The run, and the view of `pool` its conductor and fallbacks may use (the caller's choice of workers, the
    host's model only for a client that can be sampled)."""
    steps = request.max_steps or pool.max_steps
    run = Run(
        id=new_run_id(),
        task=request.task,
        context=request.context or None,
        files=list(request.files),
        metadata=dict(request.metadata),
        tools=list(request.tools),
        pool=pool.name,
        max_steps=steps,
        pool_digest=pool_digest,
        workers=request.workers,
        conductor_model=pool.conductor.model,
        worker_ids=allowed_ids(pool, request.workers, sampling),
        budget=request.budget,
        max_depth=pool.max_depth,
        max_calls=max_calls(steps),
        self_correct=pool.self_correct if request.self_correct is None else request.self_correct,
        workspace=request.workspace,
        keep_workspaces=request.keep_workspaces,
        principal=request.principal,
        trace_parent=request.trace,
    )
    return run, pool_view(pool, run.worker_ids)
