"""A GRPO step's model passes with each group's prompt computed once, against TRL's, side by side in one run.

The embedded Gemma 3 270M with a LoRA on every linear layer and TRL's fused head (as tools/train_conductor.py trains
it), on random prompts and completions of half a step's shape (default: 2 questions x 16 rollouts, 185-token
prompts, 8-token completions; the composed testbed's step has 4 questions, and TRL's side of it keeps ~20 GB of
activations: the kernel killed it for memory on a 23.5 GB machine with a training run beside it). Interleaved,
each repeat times
  1. sampling the completions: transformers' generate on the left-padded batch, as TRL calls it, against
     learning/shared_prefix.py's generate, which prefills each distinct prompt once;
  2. the log-probabilities with their backward: TRL's way (every rollout with its whole prompt) against
     shared_prefix.completion_logps;
and prints the medians, their ratios, and how far the two ways' log-probabilities are apart.

    python tools/bench_grpo_step.py [--questions 2] [--group-size 16] [--prompt-tokens 185] [--repeats 3]

Needs the `train` extra and tools/convert_gguf.py's model folder.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

# isort: off
from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before litellm loads (learning.training imports it)
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, GenerationConfig
from trl.trainer.utils import add_fused_lm_head
# isort: on

from conductor_mcp.learning import shared_prefix, training
from conductor_mcp.models import convert_gguf


def step_batch(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    """Random prompts 5 tokens apart in length (so all but the longest are padded), each repeated for its group, and
    random completions."""
    generator = torch.Generator().manual_seed(0)
    lengths = [args.prompt_tokens - 5 * i for i in range(args.questions)]
    prompts = [torch.randint(100, 5000, (n,), generator=generator) for n in lengths]
    width = max(lengths)
    prompt_ids = torch.stack([torch.cat([p.new_zeros(width - len(p)), p]) for p in prompts])
    prompt_mask = torch.stack([torch.cat([p.new_zeros(width - len(p)), p.new_ones(len(p))]) for p in prompts])
    rows = args.questions * args.group_size
    return {
        "prompt_ids": prompt_ids.repeat_interleave(args.group_size, dim=0),
        "prompt_mask": prompt_mask.repeat_interleave(args.group_size, dim=0),
        "completion_ids": torch.randint(100, 5000, (rows, args.completion_tokens), generator=generator),
        "completion_mask": torch.ones(rows, args.completion_tokens, dtype=torch.long),
    }


def trl_logps(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """TRL's `_get_per_token_logps_and_entropies` for text: every row whole, the completion positions scored."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    return model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs[:, -keep:]


def shared_logps(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return shared_prefix.completion_logps(model, *batch.values())[0]


def timed_backward(
    model: Any, way: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor], batch: dict[str, torch.Tensor]
) -> tuple[float, torch.Tensor]:
    """Seconds for the log-probabilities and the backward of a policy-gradient-shaped loss, and the log-probs."""
    model.zero_grad()
    started = time.perf_counter()
    logps = way(model, batch)
    (-logps.sum()).backward()
    return time.perf_counter() - started, logps.detach()


def timed_generate(model: Any, batch: dict[str, torch.Tensor], config: GenerationConfig, shared: bool) -> float:
    started = time.perf_counter()
    with torch.no_grad():
        if shared:
            with shared_prefix.shared_prefix_generation(model):
                model.generate(batch["prompt_ids"], attention_mask=batch["prompt_mask"], generation_config=config)
        else:
            model.generate(batch["prompt_ids"], attention_mask=batch["prompt_mask"], generation_config=config)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=185)
    parser.add_argument("--completion-tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    training.score_only_completions_on_cpu()  # as the trainer runs on a CPU
    base = AutoModelForCausalLM.from_pretrained(convert_gguf.convert())
    add_fused_lm_head(base, temperature=1.2, outputs=("log_probs", "entropy"))
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()
    batch = step_batch(args)
    config = GenerationConfig(
        max_new_tokens=args.completion_tokens, min_new_tokens=args.completion_tokens, do_sample=True,
        temperature=1.2, pad_token_id=0, disable_compile=True,
    )  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in ("generate", "generate shared", "logps", "logps shared")}
    apart = 0.0
    for _ in range(args.repeats):
        times["generate"].append(timed_generate(model, batch, config, shared=False))
        times["generate shared"].append(timed_generate(model, batch, config, shared=True))
        seconds, full = timed_backward(model, trl_logps, batch)
        times["logps"].append(seconds)
        seconds, shared = timed_backward(model, shared_logps, batch)
        times["logps shared"].append(seconds)
        apart = max(apart, float((full - shared).abs().max()))
    rows = args.questions * args.group_size
    print(f"{args.questions} prompts of ~{args.prompt_tokens} tokens x {args.group_size} rollouts of "
          f"{args.completion_tokens} tokens ({rows} rows), median of {args.repeats}, torch threads "
          f"{torch.get_num_threads()}")  # fmt: skip
    median = {name: statistics.median(values) for name, values in times.items()}
    for part in ("generate", "logps"):
        print(f"{part:>9}: TRL {median[part]:7.2f} s   shared {median[part + ' shared']:6.2f} s   "
              f"ratio {median[part] / median[part + ' shared']:5.1f}x")  # fmt: skip
    total, total_shared = median["generate"] + median["logps"], median["generate shared"] + median["logps shared"]
    print(f"{'both':>9}: TRL {total:7.2f} s   shared {total_shared:6.2f} s   ratio {total / total_shared:5.1f}x")
    print(f"largest log-probability difference between the two ways: {apart:.2e}")


if __name__ == "__main__":
    main()
