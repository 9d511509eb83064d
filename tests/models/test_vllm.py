"""The vLLM-hosted conductor against a real vLLM server (its CPU build) started by tools/serve_conductor.py.

Needs an environment with vLLM: CI builds one (cached) and sets CONDUCTOR_VLLM_PYTHON to its interpreter;
the model is the embedded Gemma 3 270M converted by tools/convert_gguf.py. Skipped when neither is there.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import litellm
import pytest
from mcp.client import Client

from conductor_mcp.config import Settings
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.models import local
from conductor_mcp.models.local import free_port
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import orchestrate, plan, write_pool

VLLM_PYTHON = os.environ.get("CONDUCTOR_VLLM_PYTHON")
MODEL_DIR = os.environ.get("CONDUCTOR_VLLM_MODEL")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.external,
    pytest.mark.skipif(not (VLLM_PYTHON and MODEL_DIR), reason="no vLLM environment (CI builds one)"),
]
TOOLS = Path(__file__).parents[2] / "tools"
ODD_IDS = ["qx-7f3a", "zv-19kd", "jm-0p2w"]  # no model writes these in valid JSON by chance


# A LoRA adapter in PEFT's format for the model (what tools/train_conductor.py saves), small random weights: vLLM
# serves it beside the base model as the conductor `conductor-lora`. Written with the vLLM environment's torch.
MAKE_ADAPTER = """
import json, sys, torch
from pathlib import Path
from safetensors.torch import save_file
out, config = Path(sys.argv[1]), json.loads((Path(sys.argv[2]) / "config.json").read_text())
dims = {"q_proj": config["num_attention_heads"] * config["head_dim"],
        "v_proj": config["num_key_value_heads"] * config["head_dim"]}
g, tensors = torch.Generator().manual_seed(0), {}
for layer in range(config["num_hidden_layers"]):
    for name, width in dims.items():
        key = f"base_model.model.model.layers.{layer}.self_attn.{name}"
        tensors[key + ".lora_A.weight"] = torch.randn(8, config["hidden_size"], generator=g) * 0.02
        tensors[key + ".lora_B.weight"] = torch.randn(width, 8, generator=g) * 0.02
out.mkdir(parents=True, exist_ok=True)
save_file(tensors, str(out / "adapter_model.safetensors"))
(out / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8,
    "lora_alpha": 16, "lora_dropout": 0.0, "bias": "none", "target_modules": list(dims),
    "base_model_name_or_path": sys.argv[2], "fan_in_fan_out": False, "modules_to_save": None}))
"""


@pytest.fixture(scope="module")
def vllm_base(tmp_path_factory: pytest.TempPathFactory) -> str:
    port = free_port()
    adapter = tmp_path_factory.mktemp("adapter") / "lora"
    subprocess.run([VLLM_PYTHON, "-c", MAKE_ADAPTER, str(adapter), MODEL_DIR], check=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TOOLS / "serve_conductor.py"),
            "--model",
            MODEL_DIR,
            "--cpu",
            "--port",
            str(port),
            "--max-model-len",
            "4096",
            "--python",
            VLLM_PYTHON,
            "--startup-timeout",
            "400",
            "--lora",
            f"conductor-lora={adapter}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once /health answered
    assert "vLLM is serving" in line, line
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(timeout=40)  # vLLM's grace, then its whole process group is killed
    with pytest.raises(OSError):  # nothing of vLLM is left serving
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def metric(base: str, name: str) -> float:
    text = urllib.request.urlopen(base.removesuffix("/v1") + "/metrics", timeout=10).read().decode()
    return sum(float(m) for m in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", text, re.M))


def served_models(base: str) -> set[str]:
    return {m["id"] for m in json.loads(urllib.request.urlopen(f"{base}/models", timeout=10).read())["data"]}


def vllm_pool(pool_dir: Path, base: str, workers: list[dict]) -> None:
    write_pool(
        pool_dir,
        {
            "name": "vllm",
            "anonymize": False,
            "max_steps": 3,
            "default_worker": workers[0]["id"],
            "conductor": {
                "model": "hosted_vllm/conductor",
                "api_base": base,
                "structured_output": "json_schema",
                "max_text_chars": 120,
                "params": {"temperature": 0.8, "max_tokens": 300},
            },
            "workers": workers,
        },
    )


async def test_response_format_is_enforced(vllm_base: str) -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^ZQ[0-9]{6}XK$"}},
        "required": ["code"],
        "additionalProperties": False,
    }
    response = await litellm.acompletion(
        model="hosted_vllm/conductor",
        api_base=vllm_base,
        messages=[{"role": "user", "content": "Say hello."}],
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": True}},
        max_tokens=40,
        temperature=1.0,
    )
    assert re.fullmatch(r"ZQ[0-9]{6}XK", json.loads(response.choices[0].message.content)["code"])


async def test_plans_are_schema_valid_and_the_prefix_cache_is_hit(vllm_base: str, pool_dir: Path) -> None:
    workers = [{"id": i, "model": "sim/generalist", "description": f"worker {i}"} for i in ODD_IDS]
    vllm_pool(pool_dir, vllm_base, workers)
    async with Service.open(Settings.from_env(state_dir=pool_dir / "state", pool_path=(pool_dir,))) as service:
        hits, queries = (
            metric(vllm_base, "vllm:prefix_cache_hits_total"),
            metric(vllm_base, "vllm:prefix_cache_queries_total"),
        )
        for task in ("What is 2 + 2?", "Name a prime number above 10.", "Summarise the causes of tides."):
            run = await plan(service, task, pool="vllm")
            assert run.fallback_reason is None and len(run.conductor_calls) == 1, run.conductor_calls
            data = json.loads(run.conductor_calls[0].raw_output)
            assert {s["worker"] for s in data["steps"]} <= set(ODD_IDS) and run.workflow.steps
        assert metric(vllm_base, "vllm:prefix_cache_queries_total") > queries
        assert metric(vllm_base, "vllm:prefix_cache_hits_total") > hits  # the shared pool prefix was served from cache


@pytest.mark.skipif(not local.server_available(), reason="the local extra is not installed")
async def test_orchestrate_with_the_vllm_conductor_and_local_workers(vllm_base: str, pool_dir: Path) -> None:
    workers = [
        {
            "id": i,
            "model": "local/gemma3-270m",
            "prompt_style": "completion",
            "description": f"worker {i}",
            "params": {"max_tokens": 32, "stop": ["\nQuestion:"]},
        }
        for i in ODD_IDS
    ]
    vllm_pool(pool_dir, vllm_base, workers)
    async with Service.open(Settings.from_env(state_dir=pool_dir / "state", pool_path=(pool_dir,))) as service:
        started = time.monotonic()
        run = await orchestrate(service, "What is the capital of France?", pool="vllm", max_steps=2)
        assert run.status == "done" and run.fallback_reason is None, (run.error, run.conductor_calls)
        assert all(s.answered_by == "local/gemma3-270m" for s in run.steps)
        assert time.monotonic() - started < 300


async def test_a_lora_adapter_served_as_the_conductor_answers_orchestrate_through_the_mcp_door(
    vllm_base: str, pool_dir: Path
) -> None:
    """The path a user of a trained conductor follows: tools/serve_conductor.py --lora NAME=ADAPTER, a pool whose
    conductor is hosted_vllm/NAME with the compact prompt it was trained on, then `orchestrate` over MCP."""
    assert {"conductor", "conductor-lora"} <= await asyncio.to_thread(served_models, vllm_base)
    write_pool(
        pool_dir,
        {
            "name": "adapter",
            "anonymize": True,
            "max_steps": 3,
            "conductor": {
                "model": "hosted_vllm/conductor-lora",
                "api_base": vllm_base,
                "prompt": "compact",
                "structured_output": "json_schema",
                "max_text_chars": 80,
                "params": {"temperature": 0.0, "max_tokens": 300},
            },
            "workers": [{"id": d, "model": f"sim/{d}", "description": f"Strongest at {d}."} for d in ("math", "code")],
            "simulation": {"time_scale": 0},
        },
    )
    async with Service.open(Settings.from_env(state_dir=pool_dir / "state", pool_path=(pool_dir,))) as service:
        async with Client(build_server(Front(service))) as client:
            result = await client.call_tool(
                "orchestrate", {"task": "Easy math task. Pitfall: units.", "pool": "adapter"}
            )
        assert not result.is_error, result.content
        data = result.structured_content
        assert data["status"] == "done" and data["answer"] and data["steps"], data
        run = service.get_run(data["run_id"])
        assert run.conductor_model == "hosted_vllm/conductor-lora" and run.fallback_reason is None, run.conductor_calls
        assert len(run.conductor_calls) == 1 and json.loads(run.conductor_calls[0].raw_output)["steps"]
