"""The run store failing under a run, and several processes racing for one run: nothing finished is paid twice."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core.pool import parse_pool
from conductor_mcp.core.workflow import Step
from conductor_mcp.engine.executor import Executor
from conductor_mcp.errors import RequestError, StoreError
from conductor_mcp.models.providers import Providers
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.service.service import Service
from tests.conftest import ask, planned_run, scripted_pool, sim_pool_doc

CHAIN = [("model_0", "Draft.", []), ("model_1", "Improve.", [0]), ("model_2", "Finish.", [1])]
SLOW = {"workers": {name: {"first_token_s": 0.3, "output_tokens": 5} for name in ("alpha", "beta", "gamma")}}


def _service(tmp_path: Path, pool_dir: Path) -> contextlib.AbstractAsyncContextManager[Service]:
    settings = Settings.from_env(
        state_dir=tmp_path / "state", pool_path=(pool_dir,), sim_call_log=tmp_path / "calls.jsonl", sim_time_scale=1
    )
    return Service.open(settings)


def _worker_calls(tmp_path: Path) -> collections.Counter[str]:
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return collections.Counter(
        json.loads(line)["digest"] for line in lines if "scripted" not in json.loads(line)["model"]
    )


async def test_a_full_disk_interrupts_the_run_and_continue_resumes_it_without_repeats(
    tmp_path: Path, pool_dir: Path
) -> None:
    scripted_pool(pool_dir, "chain", CHAIN, simulation=SLOW)
    async with _service(tmp_path, pool_dir) as service:

        async def fill_the_disk_after_step_0(event) -> None:
            if event.kind == "step_finished" and event.step.key == "0":
                pages = service._store._db.execute("PRAGMA page_count").fetchone()[0]
                service._store._db.execute(f"PRAGMA max_page_count = {pages}")  # SQLITE_FULL from the next new page

        big = "background " * 5000  # every step's prompt carries it, so each step's first write needs new pages
        run = service.start(ask("task", pool="chain", context=big))
        run = await service.wait(run.id, 30, fill_the_disk_after_step_0)
        error = run.error or ""
        assert run.status == "interrupted", error
        assert "database or disk is full" in error and f"continue_workflow {run.id}" in error
        assert "internal error" not in error
        assert service.get_run(run.id).status == "interrupted"

        service._store._db.execute("PRAGMA max_page_count = 1073741823")  # space is back
        resumed = await service.wait(service.continue_run(run.id).id, 30)
        assert resumed.status == "done", resumed.error
        assert SqliteStore(service.settings.db_path).load_run(run.id).status == "done"
        calls = _worker_calls(tmp_path)
        assert [calls[step.messages_digest or ""] for step in resumed.steps] == [1, 1, 1]


async def test_a_step_that_finishes_while_the_store_cannot_be_written_is_not_paid_for_again(
    tmp_path: Path, pool_dir: Path
) -> None:
    """Step 1 ends while every write fails: its answer is kept in memory and written when the run is continued."""
    fan_in = [("model_0", "Quick.", []), ("model_1", "Slow.", []), ("model_2", "Join.", [0, 1])]
    latency = {"alpha": 0.1, "beta": 1.0, "gamma": 0.1}
    workers = {name: {"first_token_s": delay, "output_tokens": 5} for name, delay in latency.items()}
    scripted_pool(pool_dir, "fan", fan_in, simulation={"workers": workers})
    async with _service(tmp_path, pool_dir) as service:

        async def refuse_writes_after_step_0(event) -> None:
            if event.kind == "step_finished" and event.step.key == "0":
                service._store._db.execute("PRAGMA query_only = 1")  # every write fails from here on

        run = service.start(ask("task", pool="fan"))
        run = await service.wait(run.id, 30, refuse_writes_after_step_0)
        assert run.status == "interrupted" and [s.status for s in run.steps[:2]] == ["done", "done"], run.error
        assert (
            SqliteStore(service.settings.db_path).load_run(run.id).steps[1].status == "running"
        )  # the store missed it
        service._store._db.execute("PRAGMA query_only = 0")
        resumed = await service.wait(service.continue_run(run.id).id, 30)
        assert resumed.status == "done", resumed.error
        calls = _worker_calls(tmp_path)
        assert [calls[step.messages_digest or ""] for step in resumed.steps] == [1, 1, 1]


async def test_a_running_run_of_this_server_that_is_not_executing_here_can_be_continued(
    tmp_path: Path, pool_dir: Path
) -> None:
    """What a full disk leaves behind in another server: `running`, owned by us, executing nowhere."""
    scripted_pool(pool_dir, "chain", CHAIN)
    async with _service(tmp_path, pool_dir) as service:
        run = await service.plan(ask("task", pool="chain"))
        run.status, run.owner = "running", service._lease.token
        service._store.save_run(run)
        assert service.get_run(run.id).status == "interrupted"
        resumed = await service.wait(service.continue_run(run.id).id, 30)
        assert resumed.status == "done", resumed.error


@pytest.mark.parametrize("start_status", ["interrupted", "running-orphan"])
def test_two_servers_continuing_one_run_at_once_only_one_executes_it(
    tmp_path: Path, pool_dir: Path, start_status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted_pool(pool_dir, "chain", CHAIN, simulation=SLOW)

    async def planned(task: str) -> str:
        async with _service(tmp_path, pool_dir) as service:
            run = await service.plan(ask(task, pool="chain"))
            run.status, run.owner = ("interrupted", None) if start_status == "interrupted" else ("running", "dead-1")
            service._store.save_run(run)
            return run.id

    monkeypatch.setattr(sys, "getswitchinterval", sys.getswitchinterval)
    sys.setswitchinterval(1e-6)  # threads interleave as often as they can: the race, if there is one, shows
    try:
        for attempt in range(3):
            run_id = asyncio.run(planned(f"task {attempt}"))
            barrier = threading.Barrier(2)
            outcomes: dict[int, str] = {}

            def resume(
                slot: int, run_id: str = run_id, gate: threading.Barrier = barrier, outcomes: dict[int, str] = outcomes
            ) -> None:
                async def go() -> str:
                    async with _service(tmp_path, pool_dir) as service:  # a server of its own, on its own loop
                        gate.wait()
                        try:
                            claimed = service.continue_run(run_id)
                        except RequestError as exc:
                            return str(exc)
                        return (await service.wait(claimed.id, 30)).status

                outcomes[slot] = asyncio.run(go())

            threads = [threading.Thread(target=resume, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            lost = f"run_id: run {run_id} is running in another server process"  # lost the claim: says so
            assert "done" in outcomes.values() and set(outcomes.values()) <= {"done", lost}, outcomes
    finally:
        sys.setswitchinterval(0.005)
    calls = _worker_calls(tmp_path)
    assert len(calls) == 9 and max(calls.values()) == 1, calls  # three runs of three steps, none paid twice


RESUMER = """
import asyncio, sys, time
from pathlib import Path
from conductor_mcp.config import Settings
from conductor_mcp.errors import RequestError
from conductor_mcp.service.service import Service

state, pools, calls, run_id, at = sys.argv[1:6]
settings = Settings.from_env(
    state_dir=Path(state), pool_path=(Path(pools),), sim_call_log=Path(calls), sim_time_scale=1
)

async def main() -> str:
    async with Service.open(settings) as service:
        time.sleep(max(0.0, float(at) - time.time()))  # both processes ask at the same moment
        try:
            run = service.continue_run(run_id)
        except RequestError as exc:
            return str(exc)
        return (await service.wait(run.id, 60)).status

print(asyncio.run(main()))
"""


@pytest.mark.slow  # two server processes
def test_two_processes_continuing_one_orphaned_run_at_once_only_one_executes_it(tmp_path: Path, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "chain", CHAIN, simulation=SLOW)

    async def planned() -> str:
        async with _service(tmp_path, pool_dir) as service:
            run = await service.plan(ask("task", pool="chain"))
            run.status, run.owner = "running", "a-dead-process"
            service._store.save_run(run)
            return run.id

    run_id = asyncio.run(planned())
    args = [str(tmp_path / "state"), str(pool_dir), str(tmp_path / "calls.jsonl"), run_id, str(time.time() + 8)]
    procs = [
        subprocess.Popen([sys.executable, "-c", RESUMER, *args], stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outcomes = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    lost = f"run_id: run {run_id} is running in another server process"  # or the loser follows the winner's run
    assert "done" in outcomes and set(outcomes) <= {"done", lost}, outcomes
    calls = _worker_calls(tmp_path)
    assert len(calls) == 3 and max(calls.values()) == 1, calls


async def test_a_plan_that_cannot_be_stored_whole_stores_none_of_its_steps(tmp_path: Path) -> None:
    """A workflow's steps are stored as pending in one transaction (a commit each was a third of a step's writes):
    a disk that fills midway leaves no half-stored plan, and the run's calls are not made."""
    store = SqliteStore(tmp_path / "runs.sqlite3")
    pool = parse_pool(sim_pool_doc(), source="test", default_name="testpool")
    steps = [Step(worker="model_0", instruction=f"{i} " + "x" * 20_000, access=[]) for i in range(3)]
    run = planned_run(pool, steps, "r1", max_calls=3)
    store.save_run(run)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages + 8}")  # room for one step's 20 kB record, not for three
    providers = Providers(Settings.from_env(state_dir=tmp_path, sim_time_scale=0))
    with pytest.raises(StoreError, match="database or disk is full"):
        await Executor(pool, store, providers).execute(run)
    await providers.aclose()
    store._db.execute("PRAGMA max_page_count = 1073741823")
    assert store.load_run("r1").steps == [] and all(r.attempts == [] for r in run.steps)
    store.close()
