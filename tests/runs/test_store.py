"""The SQLite store: what is written is read back whole, by another connection or another process."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from conductor_mcp.config import Settings
from conductor_mcp.core.records import Run, StepRecord
from conductor_mcp.errors import StoreError
from conductor_mcp.runs.store import Store
from conductor_mcp.service import Service

WRITER = """
import sys
from pathlib import Path
from conductor_mcp.runs.store import Store
from conductor_mcp.core.records import Run, StepRecord
store = Store(Path(sys.argv[1]))
tag = sys.argv[2]
for i in range(150):
    run = Run(id=f"{tag}-{i}", task="t", pool="p", pool_digest="d", conductor_model="m", max_steps=1)
    store.save_run(run)
    record = StepRecord(key="0", index=0, worker_id="w", visible_id="model_0", model="m", instruction="i",
                        status="done", output=tag)
    store.save_step(run.id, 0, record, [{"role": "user", "content": tag}])
"""


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    Store(db).close()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), tag]) for tag in ("a", "b", "c")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    store = Store(db)
    assert len(store.list_runs(1000)) == 450
    for tag in ("a", "b", "c"):
        run = store.load_run(f"{tag}-149")
        assert run.steps[0].output == tag
        assert store.step_messages(run.id, "0") == [{"role": "user", "content": tag}]


def test_step_messages_are_kept_when_a_later_save_omits_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    run = Run(id="r1", task="t", pool="p", pool_digest="d", conductor_model="m", max_steps=1)
    store.save_run(run)
    record = StepRecord(key="0", index=0, worker_id="w", visible_id="model_0", model="m", instruction="i")
    store.save_step("r1", 0, record, [{"role": "user", "content": "hello"}])
    record.status, record.output = "done", "answer"
    store.save_step("r1", 0, record, None)
    assert store.step_messages("r1", "0") == [{"role": "user", "content": "hello"}]
    assert store.load_run("r1").steps[0].output == "answer"
    assert Path(tmp_path / "db.sqlite3-wal").exists()  # WAL mode


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_is_private_to_its_owner_whatever_the_umask(tmp_path: Path) -> None:
    """Tasks, contexts and answers are in the store: no other account may read the directory or its files."""
    state = tmp_path / "state"
    old = os.umask(0o022)  # the usual umask, which gives 0755 directories and 0644 files
    try:
        service = Service(Settings.from_env(state_dir=state))
        run = Run(id="r1", task="my password is hunter2", pool="p", pool_digest="d", conductor_model="m", max_steps=1)
        service.store.save_run(run)
    finally:
        os.umask(old)
    files = [state / "runs.sqlite3", state / "runs.sqlite3-wal", state / "runs.sqlite3-shm"]
    files += list((state / "leases").iterdir())
    assert _mode(state) == 0o700 and _mode(state / "leases") == 0o700
    assert len(files) == 4 and {p.name: _mode(p) for p in files} == {p.name: 0o600 for p in files}
    service.store.close()
    service.lease.close()


def test_an_existing_readable_state_dir_is_tightened_with_a_warning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    (state / "runs.sqlite3").touch(mode=0o644)
    state.chmod(0o755)
    (state / "runs.sqlite3").chmod(0o644)
    with structlog.testing.capture_logs() as logs:
        Store(state / "runs.sqlite3").close()
    assert _mode(state) == 0o700 and _mode(state / "runs.sqlite3") == 0o600
    tightened = {entry["path"] for entry in logs if entry["event"] == "permissions_tightened"}
    assert tightened == {str(state), str(state / "runs.sqlite3")}


def test_a_shared_directory_is_refused_not_narrowed(tmp_path: Path) -> None:
    """A state dir such as /tmp belongs to everyone: narrowing it would break other accounts, so it is refused."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(StoreError, match="shared with other accounts"):
        Store(shared / "runs.sqlite3")
    assert _mode(shared) == 0o1777
