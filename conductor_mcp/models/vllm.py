"""Serve a conductor model with vLLM's OpenAI-compatible server, with the settings conductor-mcp relies on.

- structured outputs through xgrammar with no free whitespace (a small model can otherwise emit whitespace
  until max_tokens); vLLM ignores the old guided-decoding fields, so conductor-mcp sends response_format;
- prefix caching (on by default in vLLM): the conductor prompt keeps the pool description as a byte-identical
  prefix, so it is computed once per pool;
- LoRA adapters from tools/train_conductor.py (--lora NAME=PATH, max rank high enough for them);
- tensor and data parallelism, GPU memory share, maximum model length, an API key from an environment variable.

It waits for /health, then prints the conductor settings to put in a pool file. --dry-run only prints the
command. --cpu runs vLLM's CPU build (tests and machines without a GPU).

    python tools/serve_conductor.py --model Qwen/Qwen2.5-7B-Instruct --lora conductor=conductor-7b/adapter
    python tools/serve_conductor.py --model ~/.cache/conductor-mcp/models/gemma3-270m-hf --cpu --port 8011
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from conductor_mcp.config import child_environment, environment_value

STRUCTURED_OUTPUTS = {"backend": "xgrammar", "disable_any_whitespace": True}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", required=True, help="HF id or local folder of the (base) conductor model")
    parser.add_argument("--served-model-name", default="conductor")
    parser.add_argument("--lora", action="append", default=[], metavar="NAME=PATH", help="a LoRA adapter to serve")
    parser.add_argument("--max-lora-rank", type=int, default=64, help="vLLM's default (16) is below many adapters")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--data-parallel-size", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key-env", help="environment variable holding the API key vLLM will require")
    parser.add_argument("--cpu", action="store_true", help="vLLM's CPU build: bfloat16, eager, small KV cache")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the environment with vLLM")
    parser.add_argument("--startup-timeout", type=float, default=900)
    parser.add_argument("--dry-run", action="store_true", help="print the command and settings, start nothing")
    args = parser.parse_args(argv)
    for entry in args.lora:
        if "=" not in entry:
            parser.error(f"--lora takes NAME=PATH, got {entry!r}")
    if args.api_key_env and environment_value(args.api_key_env) is None:
        parser.error(f"--api-key-env: environment variable {args.api_key_env} is not set")
    return args


def command(args: argparse.Namespace) -> list[str]:
    cmd = [
        args.python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        args.model,
        "--served-model-name",
        args.served_model_name,
        "--max-model-len",
        str(args.max_model_len),
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--structured-outputs-config",
        json.dumps(STRUCTURED_OUTPUTS, separators=(",", ":")),
        "--tensor-parallel-size",
        str(args.tensor_parallel_size),
        "--data-parallel-size",
        str(args.data_parallel_size),
    ]
    if args.cpu:
        cmd += ["--dtype", "bfloat16", "--enforce-eager"]
    else:
        cmd += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    if args.lora:
        cmd += ["--enable-lora", "--max-lora-rank", str(args.max_lora_rank), "--lora-modules", *args.lora]
    return cmd


def environment(args: argparse.Namespace) -> dict[str, str]:
    """vLLM's environment: ours, the key moved to VLLM_API_KEY (not on the command line, where ps shows it)."""
    extra: dict[str, str] = {}
    if args.api_key_env:
        extra["VLLM_API_KEY"] = environment_value(args.api_key_env) or ""
    env = child_environment(**extra)
    if args.cpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def pool_settings(args: argparse.Namespace) -> str:
    """The conductor block of a pool file for this server (the LoRA's name when one is served).

    An adapter from tools/train_conductor.py is served as it was trained: the conductor prompt its card names,
    and no grammar. It writes the JSON it learned, spaces included, and the no-whitespace grammar pushes it off
    that format: a served warm start picked its own greedy workers on 6 of 16 held-out tasks with the grammar,
    15 of 16 without (docs/research/training.md, "A whole conductor"). The server still validates it.
    """
    name, _, adapter = args.lora[0].partition("=") if args.lora else (args.served_model_name, "", "")
    lines = ["conductor:", f"  model: hosted_vllm/{name}", f"  api_base: http://{args.host}:{args.port}/v1"]
    if args.api_key_env:
        lines.append(f"  api_key_env: {args.api_key_env}")
    if adapter:
        prompt = trained_prompt(adapter)
        lines.append(f"  prompt: {prompt}" if prompt else "  # prompt: the one the adapter was trained on")
        lines.append("  structured_output: none   # the adapter writes the JSON it was trained on")
    else:
        lines.append("  structured_output: json_schema")
    lines.append("  price: {input_per_mtok: 0.05, output_per_mtok: 0.1}   # your cost of serving it")
    return "\n".join(lines)


def trained_prompt(adapter: str) -> str | None:
    """The conductor prompt in the card train_conductor writes beside the adapter, if any (the pool loader checks
    the value like any other)."""
    try:
        return json.loads((Path(adapter).parent / "card.json").read_text()).get("conductor_prompt")
    except (OSError, ValueError, AttributeError):
        return None


def wait_healthy(base: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Return once vLLM's /health answers 200; exit if the process dies or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"vLLM exited with code {process.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    process.terminate()
    raise SystemExit(f"vLLM was not healthy within {timeout_s:.0f}s")
