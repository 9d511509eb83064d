"""A real Prometheus (Debian's `prometheus`) scrapes a real `serve --http`: /metrics behind the bearer token, and
--metrics-port on loopback without one; a run's counter is then read back through Prometheus' HTTP API."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from conductor_mcp.models.local import free_port
from tests.conftest import HttpServer

pytestmark = [pytest.mark.slow]

TOKEN = "metrics-test-token-3f9c2a7d41"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HttpServer]:
    metrics_port = free_port()
    started = HttpServer(tmp_path / "state", None, "--metrics-port", str(metrics_port), CONDUCTOR_HTTP_TOKEN=TOKEN)
    started.metrics_port = metrics_port  # type: ignore[attr-defined]
    yield started
    started.stop()


def start_prometheus(tmp_path: Path, targets: dict[str, tuple[int, bool]]) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus scraping each target every second (`job: (port, with the token)`); returns it and its API URL."""
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run installs it)")
    token_file = tmp_path / "scrape-token"
    token_file.write_text(TOKEN)
    jobs: list[dict[str, Any]] = []
    for job, (port, authorized) in targets.items():
        entry: dict[str, Any] = {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        if authorized:
            entry["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
        jobs.append(entry)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )
    return proc, f"http://127.0.0.1:{port}/api/v1/query"


def query_until(api: str, query: str, expected: str, deadline_s: float = 90.0) -> list[dict[str, Any]]:
    """Ask Prometheus until the query's first sample has the expected value; returns the result."""
    deadline = time.monotonic() + deadline_s
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            body = httpx.get(api, params={"query": query}, timeout=5).json()
            result = body["data"]["result"]
            if result and result[0]["value"][1] == expected:
                return result
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"{query}: expected {expected}, Prometheus answered {result}")


def test_prometheus_scrapes_the_server_and_reads_back_a_run(server: HttpServer, tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{server.port}"
    assert httpx.get(f"{base}/metrics").status_code == 401  # the same token as every other door
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=TOKEN, max_retries=0)
    reply = client.chat.completions.create(model="conductor/sim", messages=[{"role": "user", "content": "2+2?"}])
    assert reply.choices[0].message.content
    metrics_port = server.metrics_port  # type: ignore[attr-defined]
    proc, api = start_prometheus(tmp_path, {"conductor": (server.port, True), "loopback": (metrics_port, False)})
    try:
        for job in ("conductor", "loopback"):
            query_until(api, f'up{{job="{job}"}}', "1")
            finished = query_until(api, f'conductor_runs_finished_total{{job="{job}",status="done"}}', "1")
            assert finished[0]["metric"]["pool"] == "sim"
        query_until(api, 'sum(conductor_steps_total{job="conductor",status="done"}) >= bool 1', "1", 5)
        query_until(api, 'conductor_runs_in_flight{job="conductor"}', "0", 5)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
