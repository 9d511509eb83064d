"""Default pool selection and `doctor`: keys decide, the local pool is the keyless default."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mcp.client import Client

from conductor_mcp.config import Settings, builtin_pool_dir
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.errors import PoolError
from conductor_mcp.service.access import Front
from conductor_mcp.service.catalogue import PoolCatalog, default_pool, diagnose, load_pool, missing_keys, problems
from conductor_mcp.service.service import Service
from tests.conftest import sim_pool_doc, write_pool

BUILTIN = [builtin_pool_dir()]
FRONTIER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*FRONTIER_KEYS, "CONDUCTOR_VLLM_API_KEY", "CONDUCTOR_POOL"):
        monkeypatch.delenv(name, raising=False)


def test_no_keys_means_the_local_pool() -> None:
    assert default_pool(BUILTIN) == "local"


def test_partial_keys_are_not_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000000000")
    assert default_pool(BUILTIN) == "local"


def test_all_keys_of_a_pool_select_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FRONTIER_KEYS:
        monkeypatch.setenv(name, "sk-test-0000000000")
    assert default_pool(BUILTIN) == "frontier"


def test_problems_name_missing_keys_and_dead_endpoints() -> None:
    found = problems(load_pool("paper", BUILTIN), check_endpoints=True)
    assert "environment variable OPENAI_API_KEY is not set" in found
    assert "no OpenAI-compatible server answers at http://127.0.0.1:8001/v1" in found
    assert problems(load_pool("sim", BUILTIN), check_endpoints=True) == []


def test_a_pool_with_agents_is_never_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000000000")  # every key the agents pool's models name
    assert not missing_keys(load_pool("agents", BUILTIN))
    assert default_pool(BUILTIN) == "local"


def test_problems_name_the_agent_workers_that_cannot_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # neither CLI can be found, nor bubblewrap
    found = problems(load_pool("agents", BUILTIN), check_endpoints=False)
    assert "worker 'codex': the codex agent's program 'codex' is not on PATH" in found
    assert "worker 'claude-code': the claude agent's program 'claude' is not on PATH" in found


def test_diagnose_covers_every_pool() -> None:
    results = {d.name: d for d in diagnose(BUILTIN)}
    assert results["sim"].usable and not results["frontier"].usable
    assert {"sim", "frontier", "paper", "local"} <= set(results)


def test_doctor_command(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "conductor_mcp", "--state-dir", str(tmp_path), "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("default pool: local")
    assert "frontier     NOT USABLE" in result.stdout and "OPENAI_API_KEY is not set" in result.stdout


# ------------------------------------------------------------------------------ broken pool files

LAUGHS = ", ".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9 if prev else ['lol'] * 9)}]"
    for prev, name in zip([None, *"abcdefgh"], "abcdefghi", strict=True)
)  # "billion laughs": nine aliases of nine aliases..., 9**9 values once expanded, in a field that takes anything
BROKEN = {
    "deep": ("a: " + "[" * 100_000 + "]" * 100_000).encode(),
    "bomb": (
        "conductor: {model: sim/conductor}\n"
        f"workers: [{{id: a, model: sim/a, description: d, params: {{{LAUGHS}}}}}]\n"
    ).encode(),
    "binary": bytes(range(256)) * 4,
    "bigint": ("max_steps: " + "9" * 5000).encode(),
}


@pytest.fixture
def broken_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One good keyed pool (the default when its key is set), one written by PowerShell 5, and broken ones."""
    directory = tmp_path / "mixed"
    directory.mkdir()
    for name, content in BROKEN.items():
        (directory / f"{name}.yaml").write_bytes(content)
    keyed = sim_pool_doc(name="keyed")
    keyed["conductor"]["api_key_env"] = "TEST_KEYED_POOL_KEY"
    write_pool(directory, keyed)
    (directory / "windows.yaml").write_text(yaml.safe_dump(sim_pool_doc(name="windows")), encoding="utf-16")
    monkeypatch.setenv("TEST_KEYED_POOL_KEY", "sk-test-keyed-0000")
    monkeypatch.delenv("CONDUCTOR_POOL", raising=False)
    return directory


def test_a_utf16_pool_file_with_a_bom_is_read(broken_dir: Path) -> None:
    assert (broken_dir / "windows.yaml").read_bytes().startswith(b"\xff\xfe")
    assert [w.id for w in load_pool("windows", [broken_dir]).workers] == ["alpha", "beta", "gamma"]


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_pool_file_is_a_pool_error_naming_it(broken_dir: Path, name: str) -> None:
    started = time.perf_counter()
    with pytest.raises(PoolError, match=re.escape(str(broken_dir / f"{name}.yaml"))):
        load_pool(name, [broken_dir])
    assert time.perf_counter() - started < 10


def settings_on(directory: Path, tmp_path: Path) -> Settings:
    return Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(directory)


def test_listings_show_broken_files_and_the_rest_still_work(broken_dir: Path, tmp_path: Path) -> None:
    assert default_pool([broken_dir, *BUILTIN]) == "keyed"
    settings = settings_on(broken_dir, tmp_path)
    summaries = {s.name: s for s in PoolCatalog(list(settings.pool_dirs), settings.pool).summaries()}
    for name in BROKEN:
        assert summaries[name].error and str(broken_dir / f"{name}.yaml") in summaries[name].error
    assert not summaries["keyed"].error and not summaries["windows"].error and not summaries["sim"].error
    diagnoses = {d.name: d for d in diagnose([broken_dir])}
    assert not diagnoses["deep"].usable and str(broken_dir / "deep.yaml") in diagnoses["deep"].problems[0]
    assert diagnoses["keyed"].usable


async def test_mcp_tools_work_beside_a_broken_pool_file(broken_dir: Path, tmp_path: Path) -> None:
    async with (
        Service.open(settings_on(broken_dir, tmp_path)) as service,
        Client(build_server(Front(service))) as client,
    ):
        listing = await client.call_tool("pools", {})
        run = await client.call_tool("orchestrate", {"task": "What is 6 times 7?"})
        stored = service.get_run(run.structured_content["run_id"])
    assert not listing.is_error
    pools = {p["name"]: p for p in listing.structured_content["pools"]}
    assert listing.structured_content["default_pool"] == "keyed"
    assert "deep.yaml" in pools["deep"]["error"] and "binary.yaml" in pools["binary"]["error"]
    assert not run.is_error and run.structured_content["status"] == "done"
    assert stored.pool == "keyed"


@pytest.mark.slow
def test_cli_pools_and_doctor_beside_broken_pool_files(broken_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "CONDUCTOR_POOL_PATH": str(broken_dir), "CONDUCTOR_STATE_DIR": str(tmp_path / "state")}
    command = [sys.executable, "-m", "conductor_mcp"]
    doctor = subprocess.run([*command, "doctor"], capture_output=True, text=True, env=env, timeout=120)
    assert doctor.returncode == 0, doctor.stderr
    assert doctor.stdout.startswith("default pool: keyed")
    assert "deep         NOT USABLE" in doctor.stdout and str(broken_dir / "binary.yaml") in doctor.stdout
    pools = subprocess.run([*command, "pools", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert pools.returncode == 2, pools.stderr
    listed = {p["name"]: p for p in json.loads(pools.stdout)}
    assert str(broken_dir / "bomb.yaml") in listed["bomb"]["error"] and listed["windows"]["error"] is None
