"""Default pool selection and `doctor`: keys decide, the local pool is the keyless default."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.pools import default_pool, diagnose, load_pool, problems

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
