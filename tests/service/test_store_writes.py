"""What a run writes to its store and reads back: each change of the run committed once, and a run that ends here
not read back, on real runs and a real SQLite file (every statement its connection executes, traced by SQLite)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from conductor_mcp.core.records import Run
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.service.service import Service
from tests.conftest import orchestrate, plan, scripted_pool, start

FAN_IN = [("model_0", "Draft.", []), ("model_1", "Check.", []), ("model_2", "Join.", [0, 1])]
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


@contextlib.contextmanager
def statements(service: Service) -> Iterator[list[str]]:
    """Every statement the store's SQLite connection executes meanwhile, as SQLite traces it."""
    store = service._store
    assert isinstance(store, SqliteStore)
    executed: list[str] = []
    store._db.set_trace_callback(executed.append)
    try:
        yield executed
    finally:
        store._db.set_trace_callback(None)


def commits(executed: list[str]) -> list[str]:
    """The write transactions among `executed`: each BEGIN ... COMMIT, and each write made outside one
    (autocommitted); each as the starts of the writes it held."""
    committed: list[str] = []
    pending: list[str] | None = None
    for statement in executed:
        verb = statement.lstrip().split(" ", 1)[0].upper()
        if verb == "BEGIN":
            pending = []
        elif verb == "COMMIT" and pending is not None:
            committed.append("; ".join(pending))
            pending = None
        elif verb == "ROLLBACK":
            pending = None
        elif verb in WRITES:
            if pending is None:
                committed.append(statement[:40])
            else:
                pending.append(statement[:40])
    return committed


async def test_a_run_commits_its_plan_with_its_pending_steps(service: Service, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "fan", FAN_IN)
    with statements(service) as executed:
        run: Run = await orchestrate(service, "task", pool="fan")
    committed = commits(executed)
    assert run.status == "done" and [s.status for s in run.steps] == ["done"] * 3, run.error
    # started (the run's row), planned (its row with the 3 pending steps), each step started and ended, ended
    assert len(committed) == 1 + 1 + 2 * 3 + 1, committed
    planned = committed[1]
    assert planned.startswith("INSERT INTO runs") and planned.count("INSERT INTO steps") == 3, committed
    stored = service._store.load_run(run.id)
    assert stored.workflow == run.workflow and [s.status for s in stored.steps] == ["done"] * 3


async def test_a_plan_is_committed_once_it_is_written(service: Service, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "fan", FAN_IN)
    with statements(service) as executed:
        run = await plan(service, "task", pool="fan")
    committed = commits(executed)
    assert run.status == "planned" and run.workflow is not None and len(run.workflow.steps) == 3
    assert len(committed) == 2, committed  # the run as asked for, then with its workflow and totals
    assert service.get_run(run.id).workflow == run.workflow


async def test_a_run_that_ends_here_is_not_read_back_from_the_store(service: Service, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "fan", FAN_IN)
    run = start(service, "task", pool="fan")
    with statements(service) as executed:
        waited = await service.wait(run.id, 30)
    assert waited.status == "done", waited.error
    assert not [s for s in executed if s.lstrip().upper().startswith("SELECT")], executed
    assert waited == service._store.load_run(run.id)  # what the caller gets is what is stored
