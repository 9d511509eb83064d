"""GRPO smoke test: two steps of the embedded Gemma 3 270M (converted to a Hugging Face folder) with LoRA.

Needs the `train` extra; CI runs it in its own cached environment (.ci/run), elsewhere it is skipped.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent.parent / "tools"))
import convert_gguf
import train_conductor


def test_two_grpo_steps_change_the_adapter(tmp_path: Path) -> None:
    model = convert_gguf.convert()
    args = train_conductor.parse_args([
        "--base-model", str(model), "--pool", "sim-specialists", "--sim-tasks", "8", "--steps", "2",
        "--questions", "2", "--group-size", "4", "--max-completion-length", "8", "--lr", "1e-3",
        "--lora-r", "8", "--completion", "worker", "--seed", "3", "--out", str(tmp_path),
    ])  # fmt: skip
    card = train_conductor.train(args)
    assert len(card["losses"]) == 2 and all(math.isfinite(loss) for loss in card["losses"])
    assert len(card["reward_curve"]) == 2 and all(0.0 <= r <= 1.0 for r in card["reward_curve"])
    weights = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    lora_b = [t for name, t in weights.items() if "lora_B" in name]
    assert lora_b and any(float(t.abs().sum()) > 0 for t in lora_b)  # LoRA B starts at zero: training moved it
    assert (tmp_path / "reward_curve.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "card.json").exists()
