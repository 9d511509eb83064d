"""`doctor`'s agent check: each agent worker the pools configure and this machine has, started once as a step would
start it (a scratch workspace under the server's workspace root, its environment, our bubblewrap with the server's
state masked, the CLI's own sandbox inside), running its probe instead of a task (AgentAdapter.probe_argv), so no
model is called and nothing is paid. It finds what only a real start shows: a program or venv the sandbox hides
(under /tmp, say), a CLI sandbox that cannot nest, a helper the CLI cannot place."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from conductor_mcp.agents.runner import round_trip, unavailable_reason
from conductor_mcp.config import Settings
from conductor_mcp.core.pool import WorkerSpec
from conductor_mcp.errors import AgentUnavailable, PoolError
from conductor_mcp.service.catalogue import available_pools, load_pool


def configured_agents(pool_dirs: list[Path]) -> list[tuple[str, WorkerSpec]]:
    """(pool, worker) for each distinct agent the pools configure that can start here (the others are already
    named by the pools' diagnosis)."""
    found: dict[str, tuple[str, WorkerSpec]] = {}
    for name, path in available_pools(pool_dirs).items():
        try:
            pool = load_pool(str(path), [])
        except PoolError:
            continue
        for worker in pool.workers:
            if worker.agent is not None and unavailable_reason(worker) is None:
                found.setdefault(f"{worker.sandbox} {worker.agent.model_dump_json()}", (name, worker))
    return list(found.values())


async def check_agents(settings: Settings, say: Callable[[str], None]) -> int:
    """One round trip per configured agent, each said in a line; returns how many failed."""
    from conductor_mcp.engine.workspace_steps import open_workspaces

    agents = configured_agents(list(settings.pool_dirs))
    if not agents:
        return 0
    failed = 0
    with tempfile.TemporaryDirectory(prefix="conductor-doctor-") as scratch:
        async with open_workspaces(settings) as owner, owner.run("doctor") as scope:
            for pool, worker in agents:
                workspace = await scope.create(Path(scratch))
                try:
                    problem = await round_trip(worker, workspace)
                except AgentUnavailable as exc:
                    problem = str(exc)
                failed += problem is not None
                outcome = "round trip in its sandbox: ok" if problem is None else f"round trip FAILED: {problem}"
                say(f"agent {worker.id:<12} ({pool}, {worker.agent.cli if worker.agent else ''}) {outcome}")
    return failed
