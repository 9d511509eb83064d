"""tools/serve_conductor.py's command and settings (the server itself is exercised in test_vllm.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conductor_mcp.core.pool import parse_pool
from conductor_mcp.models import vllm as serve_conductor

TOOL = Path(__file__).parents[2] / "tools" / "serve_conductor.py"


def test_gpu_command_has_the_flags_that_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VLLM_KEY", "k" * 20)
    args = serve_conductor.parse_args(
        [
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--lora",
            "conductor=/adapters/c",
            "--tensor-parallel-size",
            "2",
            "--data-parallel-size",
            "2",
            "--api-key-env",
            "MY_VLLM_KEY",
        ]
    )
    cmd = serve_conductor.command(args)
    joined = " ".join(cmd)
    config = json.loads(cmd[cmd.index("--structured-outputs-config") + 1])
    assert config == {"backend": "xgrammar", "disable_any_whitespace": True}
    assert "--enable-lora --max-lora-rank 64 --lora-modules conductor=/adapters/c" in joined
    assert "--tensor-parallel-size 2" in joined and "--data-parallel-size 2" in joined
    assert "--gpu-memory-utilization 0.85" in joined and "k" * 20 not in joined  # the key is not on the line
    assert serve_conductor.environment(args)["VLLM_API_KEY"] == "k" * 20
    settings = yaml.safe_load(serve_conductor.pool_settings(args))
    assert (
        settings["conductor"]["model"] == "hosted_vllm/conductor"
        and settings["conductor"]["api_key_env"] == "MY_VLLM_KEY"
    )
    pool = parse_pool({**settings, "workers": [{"id": "w", "model": "sim/w", "description": "d"}]}, "t", "t")
    assert pool.conductor.structured_output == "none"  # a trained adapter writes its own JSON, spaces and all
    assert "# prompt: the one the adapter was trained on" in serve_conductor.pool_settings(args)  # no card beside it


def test_the_pool_settings_serve_an_adapter_with_the_prompt_its_card_names(tmp_path: Path) -> None:
    (tmp_path / "adapter").mkdir()
    (tmp_path / "card.json").write_text(json.dumps({"conductor_prompt": "compact"}))  # what train_conductor writes
    trained = serve_conductor.parse_args(["--model", "/models/gemma", "--lora", f"c={tmp_path / 'adapter'}"])
    base = serve_conductor.parse_args(["--model", "/models/gemma"])
    workers = [{"id": "w", "model": "sim/w", "description": "d"}]
    adapter, plain = (
        parse_pool({**yaml.safe_load(serve_conductor.pool_settings(a)), "workers": workers}, "t", "t").conductor
        for a in (trained, base)
    )
    assert (adapter.model, adapter.prompt, adapter.structured_output) == ("hosted_vllm/c", "compact", "none")
    assert (plain.model, plain.prompt, plain.structured_output) == ("hosted_vllm/conductor", "full", "json_schema")


@pytest.mark.slow  # a tool process
def test_cpu_command_and_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = serve_conductor.parse_args(["--model", "/models/gemma", "--cpu", "--port", "8011"])
    cmd = " ".join(serve_conductor.command(args))
    assert "--dtype bfloat16 --enforce-eager" in cmd and "gpu-memory" not in cmd
    assert serve_conductor.environment(args)["VLLM_CPU_KVCACHE_SPACE"]
    dry_run = subprocess.run(
        [sys.executable, str(TOOL), "--model", "/models/gemma", "--cpu", "--dry-run"], capture_output=True, text=True
    )
    assert dry_run.returncode == 0 and "--enforce-eager" in dry_run.stdout and "hosted_vllm/conductor" in dry_run.stdout
    assert "vllm.entrypoints.openai.api_server" in dry_run.stdout
    monkeypatch.delenv("NOT_SET_KEY", raising=False)
    with pytest.raises(SystemExit):
        serve_conductor.parse_args(["--model", "m", "--api-key-env", "NOT_SET_KEY"])
    with pytest.raises(SystemExit):
        serve_conductor.parse_args(["--model", "m", "--lora", "no-equals-sign"])
