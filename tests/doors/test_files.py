"""Files by path: read on the server inside the client's roots (or the server's), recorded with their digests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import types
from mcp.client import Client

from conductor_mcp.config import Settings
from conductor_mcp.context_files import read_context_files
from conductor_mcp.doors.mcp import build_server
from conductor_mcp.errors import RequestError
from conductor_mcp.service import Service

CODE = "def add(a, b):\n    return a - b  # the bug\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "calc.py").write_text(CODE, encoding="utf-8")
    (tmp_path / "secret.txt").write_text("password=hunter2", encoding="utf-8")
    return root


def roots_callback(root: Path) -> Any:
    async def list_roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=f"file://{root}", name="project")])

    return list_roots


async def test_files_inside_the_clients_roots_reach_the_workers_and_the_record(service: Service, project: Path) -> None:
    """Legacy-era hosts (today's) declare roots; the server asks for them and reads only inside them."""
    async with Client(build_server(service), mode="legacy", list_roots_callback=roots_callback(project)) as client:
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
    ],
)
async def test_bad_paths_are_named_errors(service: Service, project: Path, name: str, message: str) -> None:
    os.symlink(project.parent / "secret.txt", project / "link-out")
    (project / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (project / "big.txt").write_text("x" * 1_000_001)
    async with Client(build_server(service), mode="legacy", list_roots_callback=roots_callback(project)) as client:
        result = await client.call_tool(
            "plan", {"task": "t", "pool": "testpool", "files": [name.format(tmp=project.parent)]}
        )
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
    async with Service.open(settings) as service, Client(build_server(service), mode=mode) as client:
        inside = await client.call_tool("plan", {"task": "t", "pool": "testpool", "files": ["src/calc.py"]})
        outside = await client.call_tool(
            "plan", {"task": "t", "pool": "testpool", "files": [str(tmp_path / "secret.txt")]}
        )
    assert not inside.is_error and outside.is_error


def test_files_count_toward_the_context_limit(project: Path) -> None:
    with pytest.raises(RequestError, match="with the context"):
        read_context_files(["src/calc.py"], [project], context_chars=400_000)
