"""The SQLite store's own concerns: processes sharing a file, private files, damaged files, a full disk, VACUUM,
schema migrations (tests/runs/test_backends.py checks what both backends share)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog

from conductor_mcp.core.records import Run, StepRecord, now
from conductor_mcp.errors import StoreError
from conductor_mcp.runs.leases import FileLease
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.runs.store import SCHEMA_VERSION

WRITER = """
import sys
from pathlib import Path
from typing import Any
from conductor_mcp.runs.leases import FileLease
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.runs.store import SCHEMA_VERSION
from conductor_mcp.core.records import Run, StepRecord
store = SqliteStore(Path(sys.argv[1]))
tag = sys.argv[2]
for i in range(150):
    run = Run(id=f"{tag}-{i}", task="t", pool="p", pool_digest="d", conductor_model="m", max_steps=1)
    store.save_run(run)
    record = StepRecord(key="0", index=0, worker_id="w", visible_id="model_0", model="m", instruction="i",
                        status="done", output=tag)
    store.save_step(run.id, 0, record, [{"role": "user", "content": tag}])
"""


@pytest.mark.slow  # three writer processes
def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    SqliteStore(db).close()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), tag]) for tag in ("a", "b", "c")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    store = SqliteStore(db)
    assert len(store.list_runs(1000)) == 450
    for tag in ("a", "b", "c"):
        run = store.load_run(f"{tag}-149")
        assert run.steps[0].output == tag
        assert store.step_messages(run.id, "0") == [{"role": "user", "content": tag}]
    assert Path(tmp_path / "runs.sqlite3-wal").exists()  # WAL mode


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_is_private_to_its_owner_whatever_the_umask(tmp_path: Path) -> None:
    """Tasks, contexts and answers are in the store: no other account may read the directory or its files."""
    state = tmp_path / "state"
    old = os.umask(0o022)  # the usual umask, which gives 0755 directories and 0644 files
    try:
        store, lease = SqliteStore(state / "runs.sqlite3"), FileLease(state)
        run = Run(id="r1", task="my password is hunter2", pool="p", pool_digest="d", conductor_model="m", max_steps=1)
        store.save_run(run)
    finally:
        os.umask(old)
    files = [state / "runs.sqlite3", state / "runs.sqlite3-wal", state / "runs.sqlite3-shm"]
    files += list((state / "leases").iterdir())
    assert _mode(state) == 0o700 and _mode(state / "leases") == 0o700
    assert len(files) == 4 and {p.name: _mode(p) for p in files} == {p.name: 0o600 for p in files}
    store.close()
    lease.close()


def test_an_existing_readable_state_dir_is_tightened_with_a_warning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    (state / "runs.sqlite3").touch(mode=0o644)
    state.chmod(0o755)
    (state / "runs.sqlite3").chmod(0o644)
    with structlog.testing.capture_logs() as logs:
        SqliteStore(state / "runs.sqlite3").close()
    assert _mode(state) == 0o700 and _mode(state / "runs.sqlite3") == 0o600
    tightened = {entry["path"] for entry in logs if entry["event"] == "permissions_tightened"}
    assert tightened == {str(state), str(state / "runs.sqlite3")}


def test_a_shared_directory_is_refused_not_narrowed(tmp_path: Path) -> None:
    """A state dir such as /tmp belongs to everyone: narrowing it would break other accounts, so it is refused."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(StoreError, match="shared with other accounts"):
        SqliteStore(shared / "runs.sqlite3")
    assert _mode(shared) == 0o1777


def _run(run_id: str, **fields: Any) -> Run:
    return Run(id=run_id, task="t", pool="p", pool_digest="d", conductor_model="m", max_steps=1, **fields)


def test_a_corrupt_store_file_is_a_named_store_error(tmp_path: Path) -> None:
    """Garbage over the file: opening it says which file and what to do, and moving it aside recovers."""
    db = tmp_path / "runs.sqlite3"
    store = SqliteStore(db)
    store.save_run(_run("r1"))
    store.close()
    db.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(StoreError, match="is corrupt") as caught:
        SqliteStore(db)
    assert str(db) in str(caught.value) and "move it aside" in str(caught.value)
    db.rename(db.with_name("runs.sqlite3.corrupt"))
    assert SqliteStore(db).list_runs() == []  # a new store, as the message promised


def test_a_store_damaged_after_its_header_fails_on_read_with_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    store = SqliteStore(db)
    for i in range(200):
        store.save_run(_run(f"r{i}", context="x" * 2000))
    store.close()
    with db.open("r+b") as handle:  # keep the 100-byte header and the schema page, scribble over the rest
        handle.seek(4096)
        handle.write(os.urandom(db.stat().st_size - 4096))
    with pytest.raises(StoreError, match="is corrupt") as caught:
        reopened = SqliteStore(db)
        reopened.list_runs(1000)
        for i in range(200):
            reopened.load_run(f"r{i}")
    assert str(db) in str(caught.value)


def test_a_full_disk_is_a_store_error_that_says_what_to_do(tmp_path: Path) -> None:
    """SQLITE_FULL, made real with max_page_count: the write fails with advice, and works once space returns."""
    store = SqliteStore(tmp_path / "runs.sqlite3")
    store.save_run(_run("r1"))
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    big = StepRecord(key="0", index=0, worker_id="w", visible_id="model_0", model="m", instruction="i" * 50_000)
    with pytest.raises(StoreError, match="database or disk is full") as caught:
        store.save_step("r1", 0, big, None)
    message = str(caught.value)
    assert str(tmp_path / "runs.sqlite3") in message and "free disk space" in message
    assert "continue_workflow r1" in message
    store._db.execute("PRAGMA max_page_count = 1073741823")
    store.save_step("r1", 0, big, None)
    assert store.load_run("r1").steps[0].instruction == "i" * 50_000


def test_prune_deletes_old_finished_runs_and_their_steps_never_running_ones(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.sqlite3")
    for run_id, status in (("old-done", "done"), ("old-failed", "failed"), ("old-running", "running")):
        store.save_run(_run(run_id, status=status, context="x" * 100_000))
        record = StepRecord(key="0", index=0, worker_id="w", visible_id="model_0", model="m", instruction="i")
        store.save_step(run_id, 0, record, [{"role": "user", "content": "y" * 100_000}])
    cutoff = now()
    store.save_run(_run("new-done", status="done"))
    dry = store.prune(cutoff, ["done"], dry_run=True)
    assert dry.runs == 1 and dry.data_bytes > 200_000 and len(store.list_runs()) == 4
    pruned = store.prune(cutoff, None, dry_run=False)
    assert pruned.runs == 2 and pruned.size_after < pruned.size_before
    assert sorted(r["id"] for r in store.list_runs()) == ["new-done", "old-running"]
    assert store._db.execute("SELECT COUNT(*) FROM steps WHERE run_id LIKE 'old-d%'").fetchone()[0] == 0
    stats = store.stats()
    assert stats.runs_by_status == {"done": 1, "running": 1} and stats.oldest is not None


def test_a_file_from_before_schema_versions_opens_migrated_and_keeps_its_runs(tmp_path: Path) -> None:
    """data/schema-v1.sqlite3 was written by the store as it was before schema versions were recorded."""
    db = tmp_path / "runs.sqlite3"
    db.write_bytes((Path(__file__).parent / "data" / "schema-v1.sqlite3").read_bytes())
    db.chmod(0o600)
    store = SqliteStore(db)
    run = store.load_run("v1run")
    assert (run.status, run.steps[0].output) == ("done", "the old answer")
    assert store.step_messages("v1run", "0") == [{"role": "user", "content": "Draft."}]
    assert store.stats().schema_version == SCHEMA_VERSION
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    indexes = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"runs_by_status_time", "runs_by_pool_time", "runs_by_parent"} <= indexes
    assert run.principal == "local"  # runs from before principals are the local user's
    assert [r["id"] for r in store.list_runs(principal="local")] == ["v1run"]
    store.save_run(_run("new", principal="alice"))
    assert [r["id"] for r in store.list_runs()] == ["new", "v1run"]
    assert [r["id"] for r in store.list_runs(principal="alice")] == ["new"]


def test_a_store_from_a_newer_version_is_refused_with_advice(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    SqliteStore(db).close()
    raw = sqlite3.connect(db)
    raw.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than") as caught:
        SqliteStore(db)
    assert "upgrade conductor-mcp" in str(caught.value)
