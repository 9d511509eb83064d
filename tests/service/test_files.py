"""Files by path: read on the server inside the operator's roots, narrowed by the client's, recorded with their
digests; hostile names and files (NUL, FIFOs swapped in, blocking /proc files) fail the call, not the server."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import types
from mcp.client import Client

from conductor_mcp.config import Settings
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.errors import RequestError
from conductor_mcp.service.access import Front
from conductor_mcp.service.files import effective_roots, read_context_files
from conductor_mcp.service.service import Service
from tests.conftest import HttpServer

CODE = "def add(a, b):\n    return a - b  # the bug\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "calc.py").write_text(CODE, encoding="utf-8")
    (tmp_path / "secret.txt").write_text("password=hunter2", encoding="utf-8")
    return root


@pytest.fixture
async def service(tmp_path: Path, pool_dir: Path) -> AsyncIterator[Service]:
    """The operator allows the whole test directory (the project and the secret beside it)."""
    from tests.conftest import sim_pool_doc, write_pool

    write_pool(pool_dir, sim_pool_doc())
    settings = Settings.from_env(state_dir=tmp_path / "state", roots=(tmp_path,))
    async with Service.open(settings.with_pool_dirs_first(pool_dir)) as opened:
        yield opened


def roots_callback(*roots: Path | str) -> Any:
    async def list_roots(context: Any) -> types.ListRootsResult:
        uris = [root if isinstance(root, str) else f"file://{root}" for root in roots]
        return types.ListRootsResult(roots=[types.Root(uri=uri, name="r") for uri in uris])  # type: ignore[arg-type]

    return list_roots


async def plan_files(service: Service, files: list[str], **client: Any) -> types.CallToolResult:
    async with Client(build_server(Front(service)), mode="legacy", **client) as session:
        return await session.call_tool("plan", {"task": "t", "pool": "testpool", "files": files})


async def test_files_inside_the_clients_roots_reach_the_workers_and_the_record(service: Service, project: Path) -> None:
    """Legacy-era hosts (today's) declare roots; the server asks for them and reads only inside them."""
    async with Client(
        build_server(Front(service)), mode="legacy", list_roots_callback=roots_callback(project)
    ) as client:
        result = await client.call_tool(
            "orchestrate", {"task": "Find the bug.", "pool": "testpool", "files": ["src/calc.py"]}
        )
    data = result.structured_content
    assert data["status"] == "done", data
    run = service.get_run(data["run_id"])
    path = str((project / "src" / "calc.py").resolve())
    digest = hashlib.sha256(CODE.encode()).hexdigest()
    assert [(f.path, f.size, f.sha256) for f in run.files] == [(path, len(CODE), digest)]
    sent = service.step_messages(run.id, "0")[0]["content"]
    assert f"## File: {path}" in sent and "return a - b" in sent


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../secret.txt", "outside the allowed roots"),
        ("{tmp}/secret.txt", "outside the allowed roots"),
        ("link-out", "outside the allowed roots"),
        ("src", "is a directory"),
        ("blob.bin", "not UTF-8 text"),
        ("big.txt", "over the limit"),
        ("nope.txt", "does not exist"),
        ("/dev/null", "outside the allowed roots"),
        ("src/calc.py\x00.txt", "contains a NUL character"),
        ("\x00", "contains a NUL character"),
    ],
)
async def test_bad_paths_are_named_errors(service: Service, project: Path, name: str, message: str) -> None:
    os.symlink(project.parent / "secret.txt", project / "link-out")
    (project / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (project / "big.txt").write_text("x" * 1_000_001)
    result = await plan_files(service, [name.format(tmp=project.parent)], list_roots_callback=roots_callback(project))
    assert result.is_error and message in result.content[0].text and "files:" in result.content[0].text
    assert "hunter2" not in str(result.content)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_without_client_roots_the_servers_roots_apply(
    tmp_path: Path, pool_dir: Path, project: Path, mode: str
) -> None:
    """A client that declares no roots, or a 2026-07-28-era connection (roots deprecated): CONDUCTOR_ROOTS."""
    from tests.conftest import sim_pool_doc, write_pool

    write_pool(pool_dir, sim_pool_doc())
    settings = Settings.from_env(state_dir=tmp_path / "state", roots=(project,)).with_pool_dirs_first(pool_dir)
    async with Service.open(settings) as service, Client(build_server(Front(service)), mode=mode) as client:
        inside = await client.call_tool("plan", {"task": "t", "pool": "testpool", "files": ["src/calc.py"]})
        outside = await client.call_tool(
            "plan", {"task": "t", "pool": "testpool", "files": [str(tmp_path / "secret.txt")]}
        )
    assert not inside.is_error and outside.is_error


async def test_files_count_toward_the_context_limit(project: Path) -> None:
    with pytest.raises(RequestError, match="with the context"):
        await read_context_files(["src/calc.py"], [project], context_chars=400_000)


# ------------------------------------------------------------------ the client's roots only narrow the operator's


def test_effective_roots_narrow_never_widen(tmp_path: Path) -> None:
    inner, beside = tmp_path / "a" / "b", tmp_path.parent / "elsewhere"
    assert effective_roots([tmp_path], None) == [tmp_path.resolve()]
    assert effective_roots([tmp_path], [inner]) == [inner.resolve()]
    assert effective_roots([tmp_path], [Path("/")]) == [tmp_path.resolve()]  # cut down to what the operator allows
    assert effective_roots([tmp_path], [beside, inner, Path("/")]) == [inner.resolve(), tmp_path.resolve()]
    for declared in ([beside], [], [Path("/etc")], [Path("/tmp\x00")]):
        with pytest.raises(RequestError, match="lie outside the server's"):
            effective_roots([tmp_path], declared)


@pytest.mark.parametrize(
    ("declared", "name", "message"),
    [
        (["file:///"], "/etc/passwd", "outside the allowed roots"),  # file:/// is cut down to the operator's root
        (["file:///"], "{state}/http-token", "outside the allowed roots"),
        (["file://{project}"], "{tmp}/secret.txt", "outside the allowed roots"),  # the client narrowed it: refused
        (["file:///etc"], "/etc/passwd", "lie outside the server's"),
        ([], "src/calc.py", "lie outside the server's"),  # roots declared, none listed: nothing to read
    ],
)
async def test_client_roots_only_narrow_the_operators(
    tmp_path: Path, pool_dir: Path, project: Path, declared: list[str], name: str, message: str
) -> None:
    from tests.conftest import sim_pool_doc, write_pool

    write_pool(pool_dir, sim_pool_doc())
    state = tmp_path.parent / f"{tmp_path.name}-state"  # the server's own files, outside the roots it serves
    state.mkdir()
    (state / "http-token").write_text("the-servers-own-token")
    settings = Settings.from_env(state_dir=state, roots=(project.parent,)).with_pool_dirs_first(pool_dir)
    values = {"project": project, "tmp": project.parent, "state": state}
    roots = [root.format(**values) for root in declared]
    async with Service.open(settings) as service:
        result = await plan_files(service, [name.format(**values)], list_roots_callback=roots_callback(*roots))
    assert result.is_error and message in result.content[0].text, result.content[0].text
    assert "root:" not in str(result.content) and "the-servers-own-token" not in str(result.content)


async def test_a_root_inside_the_operators_is_honoured(service: Service, project: Path) -> None:
    (project / "src" / "inner").mkdir()
    (project / "src" / "inner" / "x.py").write_text("x = 1\n")
    narrow = roots_callback(project / "src" / "inner")
    assert not (await plan_files(service, ["x.py"], list_roots_callback=narrow)).is_error  # anchored at the client's
    assert (await plan_files(service, [str(project / "src" / "calc.py")], list_roots_callback=narrow)).is_error


async def test_a_roots_listing_failure_fails_closed(service: Service, project: Path) -> None:
    async def broken(context: Any) -> types.ListRootsResult:
        raise RuntimeError("the host's roots are unavailable")

    result = await plan_files(service, [str(project / "src" / "calc.py")], list_roots_callback=broken)
    assert result.is_error and "listing them failed" in result.content[0].text


# ---------------------------------------------------------------- reads that would block fail the call, not the loop


async def probe_while(server: HttpServer, calls: Callable[[], Awaitable[None]]) -> list[float]:
    """Run `calls` while another door (GET /v1/models) is asked every 0.2 s; the probes' latencies."""
    token = server.token_file.read_text().strip()
    latencies: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        base = server.url.removesuffix("/mcp")
        async with httpx.AsyncClient(base_url=base, headers={"authorization": f"Bearer {token}"}) as http:
            while not done.is_set():
                started = time.monotonic()
                with contextlib.suppress(httpx.TimeoutException):
                    assert (await http.get("/v1/models", timeout=5)).status_code == 200
                latencies.append(time.monotonic() - started)
                await asyncio.sleep(0.2)

    prober = asyncio.create_task(probe())
    try:
        await asyncio.wait_for(calls(), 60)
    finally:
        done.set()
        await prober
    return latencies


CALLS, DEPTH = 60, 400  # a race: the old code lost it (and froze) within 60 tries in 5 of 6 runs
SWAPPER = """
import os, sys
os.chdir(os.path.dirname(sys.argv[1]))  # relative names: the swapper's own lookups stay short
os.mkfifo(".fifo")
open(".file", "w").write("text")
while True:  # what a local user who can write inside the root does: a FIFO and a file in turns, by hard links
    for source in (".fifo", ".file"):
        os.link(source, ".next")
        os.replace(".next", "swap.txt")
"""


@pytest.mark.slow
async def test_a_fifo_swapped_in_after_the_check_blocks_nothing(tmp_path: Path, pool_dir: Path, project: Path) -> None:
    from tests.conftest import sim_pool_doc, write_pool

    write_pool(pool_dir, sim_pool_doc())
    server = HttpServer(tmp_path / "state", pool_dir, CONDUCTOR_ROOTS=str(project))
    deep = Path(*["d"] * DEPTH)  # each lookup of the path walks DEPTH directories: the window between two is wider
    (project / deep).mkdir(parents=True)
    target, name = project / deep / "swap.txt", str(deep / "swap.txt")
    outcomes: list[bool] = []

    async def calls() -> None:
        async with server.client(timeout_s=30) as client:

            async def one() -> None:
                result = await client.call_tool("plan", {"task": "t", "pool": "testpool", "files": [name]})
                outcomes.append(result.is_error)
                assert not result.is_error or "not a regular file" in result.content[0].text, result.content

            for _ in range(CALLS // 5):
                await asyncio.gather(*(one() for _ in range(5)))

    swapper = await asyncio.create_subprocess_exec(sys.executable, "-c", SWAPPER, str(target))  # flat out
    try:
        latencies = await probe_while(server, calls)
    finally:
        swapper.kill()
        await swapper.wait()
        with contextlib.suppress(OSError):  # a reader the old code left blocked on the FIFO: let it go
            os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        server.kill()
    assert len(outcomes) == CALLS and max(latencies) < 2.0, latencies
    assert True in outcomes and False in outcomes  # the race was run both ways


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/kmsg is readable by root only")
async def test_a_blocking_proc_file_fails_the_call_not_the_server(tmp_path: Path, pool_dir: Path) -> None:
    """/proc/kmsg says it is a regular file of size 0 and blocks once read to its end (it drains the kernel log's
    reader position, as any syslog reader would)."""
    if not stat.S_ISREG(os.stat("/proc/kmsg").st_mode):
        pytest.skip("/proc/kmsg is masked here (a container)")
    from tests.conftest import sim_pool_doc, write_pool

    write_pool(pool_dir, sim_pool_doc())
    server = HttpServer(tmp_path / "state", pool_dir, CONDUCTOR_ROOTS="/proc")
    results: list[types.CallToolResult] = []

    async def calls() -> None:
        async with server.client(timeout_s=30) as client:
            results.append(await client.call_tool("plan", {"task": "t", "pool": "testpool", "files": ["/proc/kmsg"]}))

    try:
        latencies = await probe_while(server, calls)
    finally:
        server.kill()
    (result,) = results
    assert result.is_error and "/proc/kmsg" in result.content[0].text and max(latencies) < 2.0, latencies
