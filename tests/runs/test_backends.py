"""Both store backends, SQLite and PostgreSQL (a real cluster), behave the same through the Store interface."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conductor_mcp.core.records import Run, StepRecord, now
from conductor_mcp.errors import RunNotFound
from conductor_mcp.runs.store import SCHEMA_VERSION, Store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def open_store(request: pytest.FixtureRequest, tmp_path: Any) -> Callable[[], Store]:
    """Opens another store on the same data each call (another connection, as another process would)."""
    opened: list[Store] = []
    if request.param == "sqlite":
        from conductor_mcp.runs.sqlite import SqliteStore

        def make() -> Store:
            opened.append(SqliteStore(tmp_path / "runs.sqlite3"))
            return opened[-1]
    else:
        from conductor_mcp.runs.postgres import PostgresStore

        url = request.getfixturevalue("postgres_url")

        def make() -> Store:
            opened.append(PostgresStore(url))
            return opened[-1]

    yield make  # type: ignore[misc]
    for store in opened:
        store.close()


def _run(run_id: str, **fields: Any) -> Run:
    return Run(
        **{"id": run_id, "task": "t", "pool": "p", "pool_digest": "d", "conductor_model": "m", "max_steps": 1, **fields}
    )


def _step(key: str = "0", **fields: Any) -> StepRecord:
    fixed = {"worker_id": "w", "visible_id": "model_0", "model": "m", "instruction": "i"}
    return StepRecord(key=key, index=int(key), **fixed, **fields)


def test_a_run_and_its_steps_read_back_whole_from_another_connection(open_store: Callable[[], Store]) -> None:
    writer, reader = open_store(), open_store()
    run = _run("r1", task="naïve \x00 task ✓", context="c" * 10_000)
    writer.save_run(run)
    writer.save_step("r1", 1, _step("1", output="second"), None)
    writer.save_step("r1", 0, _step("0", output="first"), [{"role": "user", "content": "hi ✓"}])
    loaded = reader.load_run("r1")
    expected = run.model_dump(exclude={"steps", "updated_at"}) | {"task": "naïve \ufffd task ✓"}  # no NUL in either
    assert loaded.model_dump(exclude={"steps", "updated_at"}) == expected
    assert [s.output for s in loaded.steps] == ["first", "second"]  # in their order, not their writing's
    assert reader.step_messages("r1", "0") == [{"role": "user", "content": "hi ✓"}]
    assert reader.step_messages("r1", "1") is None
    with pytest.raises(LookupError, match="no step '7'"):
        reader.step_messages("r1", "7")
    with pytest.raises(RunNotFound):
        reader.load_run("nope")
    assert writer.stats().schema_version == SCHEMA_VERSION


def test_step_messages_are_kept_when_a_later_save_omits_them(open_store: Callable[[], Store]) -> None:
    store = open_store()
    store.save_run(_run("r1"))
    record = _step()
    store.save_step("r1", 0, record, [{"role": "user", "content": "hello"}])
    record.status, record.output = "done", "answer"
    store.save_step("r1", 0, record, None)
    assert store.step_messages("r1", "0") == [{"role": "user", "content": "hello"}]
    assert store.load_run("r1").steps[0].output == "answer"


def test_list_runs_newest_first_by_status(open_store: Callable[[], Store]) -> None:
    store = open_store()
    for i, status in enumerate(["done", "failed", "done", "running"]):
        store.save_run(_run(f"r{i}", status=status, created_at=f"2026-01-0{i + 1}T00:00:00.000Z"))
    assert [r["id"] for r in store.list_runs()] == ["r3", "r2", "r1", "r0"]
    assert [r["id"] for r in store.list_runs(status="done")] == ["r2", "r0"]
    assert [r["id"] for r in store.list_runs(limit=1)] == ["r3"]
    assert set(store.list_runs()[0]) == {
        "id",
        "created_at",
        "updated_at",
        "status",
        "parent_id",
        "pool",
        "task",
        "principal",
        "totals",
    }


def test_list_runs_filters_by_pool_and_parent_and_pages_by_keyset(open_store: Callable[[], Store]) -> None:
    store = open_store()
    same_time = "2026-01-01T00:00:00.000Z"  # ties on created_at are ordered by id, so no row is skipped or repeated
    for i in range(7):
        run = _run(f"r{i}", pool="a" if i % 2 else "b", created_at=same_time if i < 4 else f"2026-01-0{i}T00:00Z")
        run.totals.total_tokens, run.parent_id = 10 * i, "r0" if i in (3, 5) else None
        store.save_run(run)
    pages, before = [], None
    while page := store.list_runs(3, before=before):
        pages.append([r["id"] for r in page])
        before = (page[-1]["created_at"], page[-1]["id"])
    assert pages == [["r6", "r5", "r4"], ["r3", "r2", "r1"], ["r0"]]
    assert [r["id"] for r in store.list_runs(pool="a")] == ["r5", "r3", "r1"]
    assert [r["id"] for r in store.list_runs(parent_id="r0")] == ["r5", "r3"]
    assert [r["id"] for r in store.list_runs(2, pool="b", before=("2026-01-05T00:00Z", "r5"))] == ["r4", "r2"]
    assert store.list_runs(1)[0]["totals"]["total_tokens"] == 60
    pages, after = [], ("2025-12-31T00:00Z", "r")  # and back, newest last page first: the viewer's "newer" link
    while page := store.list_runs(3, after=after):
        pages.append([r["id"] for r in page])
        after = (page[0]["created_at"], page[0]["id"])
    assert pages == [["r2", "r1", "r0"], ["r5", "r4", "r3"], ["r6"]]
    assert (store.count_runs(), store.count_runs(pool="a"), store.count_runs("done", pool="nowhere")) == (7, 3, 0)


def test_each_run_keeps_its_principal_and_lists_filter_by_it(open_store: Callable[[], Store]) -> None:
    store = open_store()
    for i, principal in enumerate(["alice", "bob", "alice", "local"]):
        store.save_run(_run(f"r{i}", principal=principal, created_at=f"2026-01-0{i + 1}T00:00:00.000Z"))
    store.update("r0", lambda run: [])  # a claim rewrites the row: the principal stays
    assert open_store().load_run("r0").principal == "alice"
    assert [r["id"] for r in store.list_runs(principal="alice")] == ["r2", "r0"]
    assert [r["id"] for r in store.list_runs(principal="bob", before=("2026-01-03T00:00:00.000Z", "r2"))] == ["r1"]
    assert [r["principal"] for r in store.list_runs()] == ["local", "alice", "bob", "alice"]
    assert store.list_runs(principal="nobody") == []
    assert (store.count_runs(principal="alice"), store.count_runs(principal="nobody")) == (2, 0)


def test_update_is_atomic_across_connections(open_store: Callable[[], Store]) -> None:
    """A change made inside `update` cannot be overtaken by another connection's (compare-and-swap)."""
    first, second = open_store(), open_store()
    first.save_run(_run("r1", status="interrupted"))
    inside = threading.Event()

    def slow_claim(run: Run) -> list[int] | None:
        inside.set()
        time.sleep(0.3)
        run.status, run.owner = "running", "first"
        return []

    claimer = threading.Thread(target=first.update, args=("r1", slow_claim))
    claimer.start()
    assert inside.wait(5)

    def second_claim(run: Run) -> list[int] | None:
        if run.status == "running":
            return None  # taken: write nothing
        run.status, run.owner = "running", "second"
        return []

    seen = second.update("r1", second_claim)  # blocks until the first transaction commits
    claimer.join()
    assert (seen.status, seen.owner) == ("running", "first")
    stored = second.load_run("r1")
    assert (stored.status, stored.owner) == ("running", "first")


def test_update_writes_the_changed_steps_and_nothing_on_none(open_store: Callable[[], Store]) -> None:
    store = open_store()
    store.save_run(_run("r1", status="running"))
    store.save_step("r1", 0, _step("0", status="running"), [{"role": "user", "content": "m"}])

    def interrupt(run: Run) -> list[int]:
        run.status = "interrupted"
        run.steps[0].status = "cancelled"
        return [0]

    store.update("r1", interrupt)
    assert store.update("r1", lambda run: None).status == "interrupted"
    reread = store.load_run("r1")
    assert (reread.status, reread.steps[0].status) == ("interrupted", "cancelled")
    assert store.step_messages("r1", "0") == [{"role": "user", "content": "m"}]
    with pytest.raises(RunNotFound):
        store.update("nope", lambda run: [])


def test_prune_deletes_old_finished_runs_and_their_steps_never_running_ones(open_store: Callable[[], Store]) -> None:
    store = open_store()
    for run_id, status in (("old-done", "done"), ("old-failed", "failed"), ("old-running", "running")):
        store.save_run(_run(run_id, status=status, context="x" * 100_000))
        store.save_step(run_id, 0, _step(), [{"role": "user", "content": "y" * 100_000}])
    cutoff = now()
    store.save_run(_run("new-done", status="done"))
    dry = store.prune(cutoff, ["done"], dry_run=True)
    assert dry.runs == 1 and dry.data_bytes > 200_000 and len(store.list_runs()) == 4
    pruned = store.prune(cutoff, None, dry_run=False)
    assert pruned.runs == 2 and pruned.size_before > 0
    assert sorted(r["id"] for r in store.list_runs()) == ["new-done", "old-running"]
    with pytest.raises(LookupError):
        store.step_messages("old-done", "0")
    stats = store.stats()
    assert stats.runs_by_status == {"done": 1, "running": 1} and stats.oldest is not None
