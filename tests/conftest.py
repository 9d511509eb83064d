"""Shared fixtures and helpers: an isolated state directory, instant simulated workers, small pool files, scripted
conductors, a real unreliable OpenAI-compatible server, and one-line requests."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as every entry point does (runtime.py)

import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from conductor_mcp.config import Settings
from conductor_mcp.core.events import ProgressCallback
from conductor_mcp.core.pool import Pool
from conductor_mcp.core.records import Run
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.models.local import free_port
from conductor_mcp.service.service import Service

T = TypeVar("T")
pytest_plugins = ["tests.owned_tasks"]  # every task a test starts is awaited or cancelled


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUCTOR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONDUCTOR_SIM_TIME_SCALE", "0")
    monkeypatch.setenv("CONDUCTOR_POOL", "sim")  # tests that need the automatic choice unset it
    monkeypatch.delenv("CONDUCTOR_POOL_PATH", raising=False)


def sim_pool_doc(**overrides: Any) -> dict[str, Any]:
    """A small simulated pool; tests override what they need."""
    doc: dict[str, Any] = {
        "name": "testpool",
        "anonymize": True,
        "max_steps": 5,
        "conductor": {"model": "sim/conductor", "structured_output": "json_schema"},
        "workers": [
            {
                "id": "alpha",
                "model": "sim/alpha",
                "description": "strongest at math",
                "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
            },
            {
                "id": "beta",
                "model": "sim/beta",
                "description": "strongest at code",
                "price": {"input_per_mtok": 3.0, "output_per_mtok": 4.0},
            },
            {
                "id": "gamma",
                "model": "sim/gamma",
                "description": "generalist",
                "price": {"input_per_mtok": 0.5, "output_per_mtok": 0.5},
            },
        ],
        "simulation": {
            "conductors": {"conductor": {"malformed_rate": 0.0}},
            "workers": {
                "alpha": {"skills": {"math": 0.9}, "output_tokens": 50},
                "beta": {"skills": {"code": 0.9}, "output_tokens": 60},
                "gamma": {"default_skill": 0.5, "output_tokens": 40},
            },
        },
    }
    doc.update(overrides)
    return doc


def planned_run(pool: Pool, steps: list[Step], run_id: str, **fields: Any) -> Run:
    """A run on `pool` whose plan is `steps` (no conductor call): what an executor runs straight from the store."""
    return Run(
        id=run_id,
        task="t",
        pool=pool.name,
        pool_digest=pool.digest(),
        conductor_model="none",
        max_steps=len(steps),
        workflow=Workflow(steps=steps),
        **fields,
    )


def slow_pool_doc(name: str, first_token_s: float) -> dict[str, Any]:
    """A simulated pool whose workers take about `first_token_s` per call (time scale 1: unset
    CONDUCTOR_SIM_TIME_SCALE, which the tests set to 0, in the process that runs it)."""
    doc = sim_pool_doc(name=name)
    doc["simulation"]["time_scale"] = 1.0
    doc["simulation"]["conductors"]["conductor"].update(first_token_s=0.0, tokens_per_s=100_000)
    for profile in doc["simulation"]["workers"].values():
        profile.update(first_token_s=first_token_s, tokens_per_s=100_000)
    return doc


@pytest.fixture
def pool_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "pools"
    directory.mkdir()
    return directory


def write_pool(directory: Path, doc: dict[str, Any]) -> Path:
    path = directory / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def scripted_pool(pool_dir: Path, name: str, steps: list[tuple[str, str, Any]], **overrides: Any) -> str:
    """A pool whose conductor always answers with this workflow (litellm's mock_response, same call path)."""
    workflow = {"reasoning": "scripted", "steps": [{"worker": w, "instruction": i, "access": a} for w, i, a in steps]}
    doc = sim_pool_doc(name=name, **overrides)
    doc["conductor"] = {
        "model": "openai/scripted-conductor",
        "params": {"mock_response": json.dumps(workflow)},
        "structured_output": "none",
        "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.1},
    }
    write_pool(pool_dir, doc)
    return name


@pytest.fixture(scope="module")
def faulty_base() -> str:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("faulty_server.py")), str(port)])
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{base}/v1/models", timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "faulty server did not start"
            time.sleep(0.1)
    yield base
    proc.kill()  # not terminate: uvicorn would wait for the "slow" requests still sleeping
    proc.wait(timeout=10)


def worker(base: str, behaviour: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": behaviour,
        "model": f"hosted_vllm/{behaviour}",
        "api_base": f"{base}/v1",
        "description": f"behaves: {behaviour}",
        **fields,
    }


@pytest.fixture
async def service(tmp_path: Path, pool_dir: Path) -> AsyncIterator[Service]:
    write_pool(pool_dir, sim_pool_doc())
    async with Service.open(Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)) as opened:
        yield opened


# ------------------------------------------------------------------------------ requests in one line


def ask(task: str, **fields: Any) -> RunRequest:
    """A RunRequest from keyword fields, validated as every door validates it."""
    return RunRequest.of(task=task, **fields)


async def orchestrate(service: Service, task: str, on_event: ProgressCallback | None = None, **fields: Any) -> Run:
    return await service.orchestrate(ask(task, **fields), on_event)


async def plan(service: Service, task: str, on_event: ProgressCallback | None = None, **fields: Any) -> Run:
    return await service.plan(ask(task, **fields), on_event)


def start(service: Service, task: str, workflow: Workflow | None = None, **fields: Any) -> Run:
    return service.start(ask(task, **fields), workflow)


def in_service(settings: Settings, use: Callable[[Service], Awaitable[T]]) -> T:
    """Open a service on a loop of its own, use it, close it: for tests that are not async themselves."""

    async def go() -> T:
        async with Service.open(settings) as service:
            return await use(service)

    return asyncio.run(go())


# ------------------------------------------------------------------------------ tasks and waits


@contextlib.asynccontextmanager
async def owned_task(coroutine: Coroutine[Any, Any, T]) -> AsyncIterator[asyncio.Task[T]]:
    """`coroutine` as a task for the block. Leaving the block, the task is cancelled if it still runs and awaited;
    when the block fails, the task's own outcome is read too: a failing test leaves nothing behind."""
    task = asyncio.create_task(coroutine)
    try:
        yield task
    except BaseException:
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # read: the block's failure is the one to report
        raise
    task.cancel()
    await asyncio.wait({task})


async def until(condition: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """Wait until `condition()` is true and return it: a wait on the state itself, however slow the machine, not a
    guess at how long it takes. Fails the test naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        await asyncio.sleep(0.05)
    return value


# ------------------------------------------------------------------------------ server processes

INITIALIZE = {  # a raw MCP initialize request, for tests that speak HTTP below the SDK
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}


def server_env(state_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "CONDUCTOR_STATE_DIR": str(state_dir), **extra}


class HttpServer:
    """`conductor-mcp serve --http` as a subprocess on a free loopback port."""

    def __init__(self, state_dir: Path, pool_dir: Path | None = None, *args: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.token_file = state_dir / "http-token"
        extra = {"CONDUCTOR_POOL_PATH": str(pool_dir)} if pool_dir else {}
        # The server's log goes to a file: a pipe nobody reads fills up under load and blocks the server.
        self.log_path = state_dir.parent / f"serve-http-{self.port}.log"
        with self.log_path.open("wb") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "conductor_mcp", "serve", "--http", "--port", str(self.port), *args],
                env=server_env(state_dir, **extra, **env),
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text(errors="replace")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError("HTTP server did not start")

    def client(self, timeout_s: float = 5.0) -> Client:
        """An MCP client that sends the token the server keeps in its state directory."""
        import httpx2

        token = self.token_file.read_text().strip()
        http_client = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=timeout_s)
        return Client(streamable_http_client(self.url, http_client=http_client))

    def stderr(self) -> str:
        """What the server has written on stderr."""
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def processes_with(token: str) -> list[int]:
    """Host pids whose command line contains `token` (the host sees the sandbox's processes too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# ------------------------------------------------------------------------------ a real browser

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def headless_chromium(width: int = 1280, height: int = 900) -> Any:
    """Debian's chromium driven by Selenium through the system chromedriver, headless (`--no-sandbox`: CI runs
    as root). Skips the calling test when either is missing (.ci/run installs them)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service as DriverService
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=DriverService(executable_path=CHROMEDRIVER))


def viewer_login(driver: Any, base: str, token: str) -> None:
    """Sign the browser in to a server's viewer with a one-time login URL minted with the bearer token."""
    request = urllib.request.Request(
        f"{base}/ui/login-codes", method="POST", headers={"authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        url = json.loads(response.read())["url"]
    driver.get(base + url)


def worker_calls(call_log: Path) -> collections.Counter[str]:
    """How often the simulator answered each exact message list (by digest), the conductor's calls left out."""
    entries = [json.loads(line) for line in call_log.read_text().splitlines()]
    return collections.Counter(e["digest"] for e in entries if e["model"] != "scripted-conductor")


# ------------------------------------------------------------------------------ PostgreSQL


def _as_postgres(args: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the `postgres` account."""
    if os.getuid() != 0:
        return args
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in args)]


class PostgresCluster:
    """The session's throwaway cluster: its base URL, and a restart (for the tests of surviving one)."""

    def __init__(self, url: str, pg_ctl: Path, data: Path) -> None:
        self.url, self._pg_ctl, self._data = url, pg_ctl, data

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: every session is ended, the server is back when this returns."""
        log = self._data.parent / "log"  # without -l the server would hold the pipe this call reads
        restart = [str(self._pg_ctl), "-D", str(self._data), "-l", str(log), "-m", "fast", "-w", "restart"]
        subprocess.run(_as_postgres(restart), check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL cluster (Debian's `postgresql` package) on a loopback port."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")
    pg_ctls = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not pg_ctls:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it)")
    bindir = pg_ctls[-1].parent
    base = Path(tempfile.mkdtemp(prefix="conductor-pg-"))
    if os.getuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data, port = base / "data", free_port()
    subprocess.run(
        _as_postgres(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]
        ),
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
    start = [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-o", options, "start"]
    subprocess.run(_as_postgres(start), check=True, capture_output=True)
    try:
        yield PostgresCluster(f"postgresql://postgres@127.0.0.1:{port}", bindir / "pg_ctl", data)
    finally:
        subprocess.run(
            _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]), capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server(postgres_cluster: PostgresCluster) -> str:
    """The session cluster's base URL."""
    return postgres_cluster.url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A new, empty database on the session's cluster, for one test."""
    import psycopg

    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    return f"{postgres_server}/{name}"
