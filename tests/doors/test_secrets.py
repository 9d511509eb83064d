"""Recognisable fake keys go through success and failure paths; none may appear in any output or file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.client import Client

from conductor_mcp.config import Settings
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import scripted_pool, worker, write_pool

pytestmark = [pytest.mark.slow]

CONDUCTOR_KEY = "sk-FAKEconductor0123456789abcdef"
WORKER_KEY = "wk-SECRETworker-abcdef0123456789"  # in a variable whose name says nothing about secrets
FILE_KEY = "kf-SECRETfile-0123456789abcdef"
SECRETS = (CONDUCTOR_KEY, WORKER_KEY, FILE_KEY)


async def test_keys_never_leak(tmp_path: Path, pool_dir: Path, faulty_base: str) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text(FILE_KEY + "\n")
    write_pool(
        pool_dir,
        {
            "name": "secret-replan",
            "anonymize": False,
            "recursion": True,
            "max_steps": 4,
            "conductor": {
                "model": "hosted_vllm/conductor",
                "api_base": f"{faulty_base}/v1",
                "structured_output": "none",
                "api_key_env": "OPENAI_API_KEY",
            },
            "workers": [
                worker(faulty_base, "ok", api_key_env="MY_WORKER_VAR"),
                worker(faulty_base, "down", api_key_file=str(key_file), max_retries=1),
            ],
        },
    )
    scripted_pool(
        pool_dir,
        "secret-echo",
        [("badrequest", "Solve it.", [])],
        anonymize=False,
        workers=[worker(faulty_base, "badrequest", api_key_env="MY_WORKER_VAR")],
    )
    state = tmp_path / "state"
    env = {
        **os.environ,
        "OPENAI_API_KEY": CONDUCTOR_KEY,
        "MY_WORKER_VAR": WORKER_KEY,
        "CONDUCTOR_LOG_LEVEL": "debug",
        "CONDUCTOR_POOL_PATH": str(pool_dir),
        "CONDUCTOR_RETRY_BASE_S": "0.01",
    }
    outputs = []
    runs = {}
    for pool in ("secret-replan", "secret-echo"):
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "conductor_mcp", "--state-dir", str(state), "run", "--pool", pool, "--json", "t"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        outputs += [result.stdout, result.stderr]
        runs[pool] = json.loads(result.stdout)
    assert runs["secret-replan"]["status"] == "done"  # success path, through a failed step and a re-plan
    echo = runs["secret-echo"]
    assert echo["status"] == "failed" and "[redacted]" in echo["steps"][0]["error"]  # the key was sent, and masked

    os.environ["MY_WORKER_VAR"] = WORKER_KEY  # this process reads resources; make it know the names too
    try:
        settings = Settings.from_env(state_dir=state, pool_path=(pool_dir,))
        async with Service.open(settings) as service, Client(build_server(Front(service))) as client:
            for run in runs.values():
                outputs.append((await client.read_resource(f"conductor://runs/{run['id']}")).contents[0].text)
                for step in run["steps"]:
                    uri = f"conductor://runs/{run['id']}/steps/{step['key']}"
                    outputs.append((await client.read_resource(uri)).contents[0].text)
            for name in ("secret-replan", "secret-echo"):
                outputs.append((await client.read_resource(f"conductor://pools/{name}")).contents[0].text)
            pools = await client.call_tool("pools", {})
            outputs.append(json.dumps(pools.structured_content))
    finally:
        del os.environ["MY_WORKER_VAR"]
    stored = b"".join(path.read_bytes() for path in state.rglob("*") if path.is_file())
    assert len(outputs) > 10 and stored
    for secret in SECRETS:
        assert not any(secret in text for text in outputs), secret
        assert secret.encode() not in stored, secret


async def test_pool_resource_masks_header_values_and_url_credentials(pool_dir: Path) -> None:
    """A pool's params (an Authorization header, say) and its api_base's credentials are shown by name only."""
    base = "https://bob:pa55word-in-url@llm.example:8443/v1?api_key=q-SECRETquery-123&region=eu#frag-SECRET"
    conductor = {
        "model": "hosted_vllm/c",
        "api_base": base,
        "api_key_env": "MY_CONDUCTOR_KEY",
        "params": {
            "temperature": 0.3,
            "extra_headers": {"Authorization": "Bearer hdr-SECRET-0123456789"},
            "stop": ["tok-SECRET-in-list"],
        },
    }
    workers = [worker("http://127.0.0.1:9", "ok", api_key_file="/keys/worker.txt")]
    write_pool(pool_dir, {"name": "masked", "conductor": conductor, "workers": workers})
    settings = Settings.from_env().with_pool_dirs_first(pool_dir)
    async with Service.open(settings) as service, Client(build_server(Front(service))) as client:
        text = (await client.read_resource("conductor://pools/masked")).contents[0].text
    for secret in ("pa55word-in-url", "bob", "q-SECRETquery-123", "hdr-SECRET", "tok-SECRET", "frag-SECRET"):
        assert secret not in text
    shown = json.loads(text)["conductor"]
    assert shown["api_base"] == "https://***@llm.example:8443/v1?api_key=***&region=***#***"
    assert shown["params"] == {"temperature": 0.3, "extra_headers": {"Authorization": "***"}, "stop": ["***"]}
    assert shown["api_key_env"] == "MY_CONDUCTOR_KEY"
    assert json.loads(text)["workers"][0]["api_key_file"] == "/keys/worker.txt"


def test_a_secret_set_in_the_environment_later_is_masked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from conductor_mcp.runtime.logs import REDACTED, redact_values

    assert redact_values("late-secret-value-123") == "late-secret-value-123"  # not a secret yet
    monkeypatch.setenv("LATE_API_KEY", "late-secret-value-123")
    assert redact_values("the key late-secret-value-123") == f"the key {REDACTED}"
    monkeypatch.setenv("LATE_API_KEY", "another-secret-value-456")  # the same name, a new value
    assert redact_values("another-secret-value-456") == REDACTED
