RESUMER = """
import asyncio, sys, time
from pathlib import Path
from conductor_mcp.config import Settings
from conductor_mcp.errors import RequestError
from conductor_mcp.service import Service

state, pools, calls, run_id, at = sys.argv[1:6]
settings = Settings.from_env(state_dir=Path(state), pool_path=(Path(pools),), sim_call_log=Path(calls), sim_time_scale=1)
service = Service(settings)

async def main() -> str:
    time.sleep(max(0.0, float(at) - time.time()))  # both processes ask at the same moment
    try:
        run = service.continue_run(run_id)
    except RequestError as exc:
        return str(exc)
    return (await service.wait(run.id, 60)).status

print(asyncio.run(main()))
"""


def test_two_processes_continuing_one_interrupted_run_at_once_exactly_one_wins(tmp_path: Path, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "chain", CHAIN, simulation=SLOW)
    service = _service(tmp_path, pool_dir)
    run = asyncio.run(service.plan(ask("task", pool="chain")))
    run.status, run.owner = "running", "a-dead-process"
    service.store.save_run(run)
    args = [str(tmp_path / "state"), str(pool_dir), str(tmp_path / "calls.jsonl"), run.id, str(time.time() + 8)]
    procs = [
        subprocess.Popen([sys.executable, "-c", RESUMER, *args], stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outcomes = sorted(proc.communicate(timeout=120)[0].strip() for proc in procs)
    assert outcomes == ["done", f"run_id: run {run.id} is running in another server process"], outcomes
    calls = _worker_calls(tmp_path)
    assert len(calls) == 3 and max(calls.values()) == 1, calls
