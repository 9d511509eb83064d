"""Metrics of a service, read back from its own registry: runs, steps, usage and the faults of real calls."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core.records import Run
from conductor_mcp.doors.viewer.routes import ViewerAuth
from conductor_mcp.errors import StoreError
from conductor_mcp.runs.leases import FileLease
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.service.service import Service
from conductor_mcp.telemetry.metrics import Metrics
from conductor_mcp.telemetry.observer import RunWatch
from tests.conftest import ask, scripted_pool, sim_pool_doc, worker, write_pool
from tests.doors.http.test_auth import TOKEN, serving


def sample(service: Service, name: str, **labels: str) -> float | None:
    return service.telemetry.metrics.registry.get_sample_value(name, labels)


def used(run: Run, worker_id: str, field: str) -> float:
    return sum(getattr(s, field) for s in run.steps if s.worker_id == worker_id)


@pytest.mark.slow
async def test_a_run_counts_in_its_own_services_registry(
    tmp_path: Path, pool_dir: Path, faulty_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONDUCTOR_RETRY_BASE_S", "0.01")
    workers = [
        worker(faulty_base, "flaky500-1", max_retries=1, price={"input_per_mtok": 1.0, "output_per_mtok": 2.0}),
        worker(faulty_base, "down", max_retries=0, fallbacks=["ok"]),
        worker(faulty_base, "ok"),
    ]
    steps = [("flaky500-1", "Solve it.", []), ("down", "Check it.", [0])]
    pool = scripted_pool(pool_dir, "observed", steps, workers=workers, anonymize=False)
    settings = Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)
    async with Service.open(settings) as one, Service.open(settings) as other:
        run = await one.orchestrate(ask("task", pool=pool))
        assert run.status == "done", run.error
        assert sample(one, "conductor_runs_started_total", pool=pool) == 1
        assert sample(one, "conductor_runs_finished_total", pool=pool, status="done") == 1
        assert sample(one, "conductor_runs_in_flight", pool=pool) == 0
        assert sample(one, "conductor_run_duration_seconds_count", pool=pool, status="done") == 1
        assert sample(one, "conductor_steps_total", worker="flaky500-1", status="done") == 1
        assert sample(one, "conductor_steps_total", worker="down", status="done") == 1
        assert sample(one, "conductor_step_duration_seconds_count", worker="down") == 1
        assert sample(one, "conductor_provider_retries_total", model="hosted_vllm/flaky500-1") == 1
        assert sample(one, "conductor_provider_fallbacks_total", model="hosted_vllm/down") == 1
        for worker_id in ("flaky500-1", "down"):
            tokens = sample(one, "conductor_tokens_total", pool=pool, worker=worker_id, direction="input")
            assert tokens == used(run, worker_id, "prompt_tokens") > 0
        cost = sample(one, "conductor_cost_usd_total", pool=pool, worker="flaky500-1")
        assert cost == pytest.approx(used(run, "flaky500-1", "cost_usd")) and cost > 0
        conductor = sample(one, "conductor_tokens_total", pool=pool, worker="conductor", direction="output")
        assert conductor == run.conductor_calls[0].completion_tokens > 0
        assert sample(one, "conductor_replicas_live", backend="sqlite") == 2  # both services hold a lease
        assert sample(one, "conductor_store_errors_total", backend="sqlite") == 0
        assert sample(other, "conductor_runs_started_total", pool=pool) is None  # registries are per service
        text = one.telemetry.metrics.exposition().decode()
        assert f'conductor_runs_finished_total{{pool="{pool}",status="done"}} 1.0' in text


async def test_conductor_repairs_and_fallbacks_are_counted(service: Service, pool_dir: Path) -> None:
    repaired = scripted_pool(pool_dir, "repaired", [("model_0", "Solve it.", [3])])
    garbage = {"model": "openai/garbage", "params": {"mock_response": "no workflow here"}, "structured_output": "none"}
    write_pool(pool_dir, sim_pool_doc(name="fallen", conductor=garbage))
    runs = [await service.orchestrate(ask("task", pool=name)) for name in (repaired, "fallen")]
    assert runs[0].repairs and runs[1].fallback_reason
    assert sample(service, "conductor_conductor_repairs_total", pool=repaired) == len(runs[0].repairs)
    assert sample(service, "conductor_conductor_fallbacks_total", pool="fallen") == 1
    assert sample(service, "conductor_conductor_fallbacks_total", pool=repaired) is None


async def test_a_cancelled_run_counts_its_cut_steps(tmp_path: Path, pool_dir: Path) -> None:
    doc = sim_pool_doc(name="slowish")
    doc["workers"][0]["params"] = {"mock_response": "late", "mock_delay": 30}
    doc["workers"][0]["model"] = "openai/late"
    scripted_pool(pool_dir, "slowish", [("model_0", "Solve it.", [])], workers=doc["workers"])
    settings = Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)
    async with Service.open(settings) as service:
        run = service.start(ask("task", pool="slowish"))
        async for event in service.follow(run.id):
            if event.kind == "step_started":
                break
        cancelled = await service.cancel(run.id)
        assert cancelled.status == "cancelled"
        assert sample(service, "conductor_steps_total", worker="alpha", status="cancelled") == 1
        assert sample(service, "conductor_runs_finished_total", pool="slowish", status="cancelled") == 1
        assert sample(service, "conductor_runs_in_flight", pool="slowish") == 0


def test_store_errors_are_counted(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.sqlite3")
    lease = FileLease(tmp_path)
    metrics = Metrics(store, lease)
    store.close()
    with pytest.raises(StoreError):
        store.load_run("nope")
    assert metrics.registry.get_sample_value("conductor_store_errors_total", {"backend": "sqlite"}) == 1
    assert metrics.registry.get_sample_value("conductor_replicas_live", {"backend": "sqlite"}) == 1
    lease.close()
    assert metrics.registry.get_sample_value("conductor_replicas_live", {"backend": "sqlite"}) == 0


async def test_metrics_over_http_are_for_admins_only(tmp_path: Path) -> None:
    from conductor_mcp.service.tokens import TokenBook

    book = TokenBook(tmp_path / "tokens.json")
    user, admin = book.add("alice"), book.add("ops", admin=True)
    async with serving(tmp_path, ViewerAuth(TOKEN, tokens=book)) as client:
        assert (await client.get("/metrics")).status_code == 401
        refused = await client.get("/metrics", headers={"authorization": f"Bearer {user}"})
        assert refused.status_code == 403 and "admin" in refused.json()["error"]
        for token in (admin, TOKEN):
            scraped = await client.get("/metrics", headers={"authorization": f"Bearer {token}"})
            assert scraped.status_code == 200 and "conductor_store_errors_total" in scraped.text
            assert scraped.headers["content-type"].startswith("text/plain; version=")


def test_a_metrics_port_that_is_no_port_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    from conductor_mcp.cli.commands import main

    assert main(["serve", "--metrics-port", "70000"]) == 2
    assert "--metrics-port: 70000 is not a port number" in capsys.readouterr().err


async def test_a_finished_run_leaves_nothing_for_the_cycle_collector(service: Service) -> None:
    """Each run's watch held its records in a cycle (its handlers were its own bound methods) until a full
    collection, which a settled server makes rarely: the 1,000-run hold's RSS grew with them. Freed by reference
    counting, they never reach the collector."""
    await service.orchestrate(ask("warm up"))
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector frees is kept in gc.garbage instead
    try:
        run = await service.orchestrate(ask("Work out step by step whether 97 is prime."))
        assert run.status == "done", run.error
        del run
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if isinstance(o, Run | RunWatch)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []
