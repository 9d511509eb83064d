"""GRPO smoke test: two steps of the embedded Gemma 3 270M (converted to a Hugging Face folder) with LoRA.

Needs the `train` extra; CI runs it in its own cached environment (.ci/run), elsewhere it is skipped.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("trl")
from safetensors.torch import load_file

from conductor_mcp.learning import training as train_conductor
from conductor_mcp.models import convert_gguf

pytestmark = [pytest.mark.slow, pytest.mark.external]


def test_two_grpo_steps_change_the_adapter(tmp_path: Path) -> None:
    model = convert_gguf.convert()
    args = train_conductor.parse_args([
        "--base-model", str(model), "--pool", "sim-specialists", "--sim-tasks", "8", "--steps", "2",
        "--questions", "2", "--group-size", "4", "--max-completion-length", "8", "--lr", "1e-3",
        "--lora-r", "8", "--completion", "worker", "--seed", "3", "--eval-tasks", "4", "--out", str(tmp_path),
    ])  # fmt: skip
    card = train_conductor.train(args)
    assert len(card["losses"]) == 2 and all(math.isfinite(loss) for loss in card["losses"])
    assert len(card["reward_curve"]) == 2 and all(0.0 <= r <= 1.0 for r in card["reward_curve"])
    weights = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    lora_b = [t for name, t in weights.items() if "lora_B" in name]
    assert lora_b and any(float(t.abs().sum()) > 0 for t in lora_b)  # LoRA B starts at zero: training moved it
    assert (tmp_path / "reward_curve.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "card.json").exists()
    for when in ("before", "after"):  # the greedy policy on held-out tasks, scored through the same reward
        held_out = card["held_out"][when]
        assert held_out["tasks"] == 4 and set(held_out["accuracy_by_domain"]) == {"math", "code", "science", "general"}
        assert 0.0 <= held_out["mean_reward"] <= 1.0
    assert "held-out tasks" in (tmp_path / "README.md").read_text()


def test_cpu_scoring_of_completion_tokens_only_gives_the_same_log_probs(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer import utils as trl_utils

    model = AutoModelForCausalLM.from_pretrained(convert_gguf.convert())
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    input_ids = torch.randint(100, 5000, (2, 12), generator=torch.Generator().manual_seed(0))
    labels = input_ids.clone()
    labels[:, :8] = -100  # the prompt: only the last four tokens are a completion

    def scored() -> tuple[torch.Tensor, torch.Tensor]:
        out = model(input_ids=input_ids, labels=labels, fused_lm_head=True)
        return out.log_probs, out.entropy

    every_position = scored()
    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton)  # restored after the test
    train_conductor.score_only_completions_on_cpu()
    assert trl_utils._use_triton(torch.device("cpu"))  # the fused head now takes its compact path on a CPU
    completions_only = scored()
    for full, compact in zip(every_position, completions_only, strict=True):
        assert torch.allclose(full, compact, atol=1e-5) and bool(full[:, -3:].abs().sum() > 0)
