"""GRPO with each group's prompt computed once, not once per rollout.

A GRPO group is G rollouts of one prompt. On the composed testbed a prompt is ~180 tokens and a completion ~8, so
TRL's passes (sampling the rollouts, their log-probabilities and the backward through them) spend most of a step
recomputing one prompt G times: a py-spy profile put 97% of a step in these passes, and ~95% of their tokens are
prompt tokens. Here a prompt's keys and values are computed once, repeated for its rollouts, and only the
completions run on top: the same log-probabilities and the same gradients (every rollout's gradient flows back
through the one prompt pass) from ~1/10 of the tokens.

Gradient checkpointing drops caches in training mode, so with it the trainer keeps TRL's own passes.
Imported only where the `train` extra is installed (learning/training.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import DynamicCache
from trl import GRPOTrainer


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[tuple[torch.Tensor, list[int]]]:
    """The distinct prompts (their padding removed) and the rows that hold each, in the order first seen."""
    groups: dict[tuple[int, ...], tuple[torch.Tensor, list[int]]] = {}
    for row in range(prompt_ids.size(0)):
        prompt = prompt_ids[row][prompt_mask[row].bool()]
        groups.setdefault(tuple(prompt.tolist()), (prompt, []))[1].append(row)
    return list(groups.values())


def prefix_cache(model: Any, prompt: torch.Tensor, repeats: int) -> DynamicCache:
    """The keys and values of the prompt's tokens but its last, computed once and repeated for `repeats` rows.

    The last token is left to the pass that follows, whose first position then predicts the first completion token.
    Under autograd the cache keeps its graph, so gradients reach the prompt's pass through it."""
    if prompt.size(0) < 2:
        raise ValueError("a shared prefix needs a prompt of two or more tokens (a chat template gives more)")
    cache = DynamicCache(config=model.config)
    model(input_ids=prompt[None, :-1], cache=cache, use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(repeats)
    return cache


def completion_logps(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each completion token's log-probability and the entropy of its distribution (zero where masked), by TRL's
    fused head (`add_fused_lm_head`: temperature, soft-capping and scoring only the completion positions). The
    entropy is None where the head does not compute it (TRL's separate reference model)."""
    logps, entropies, order = [], [], []
    for prompt, rows in prompt_groups(prompt_ids, prompt_mask):
        cache = prefix_cache(model, prompt, len(rows))
        ids = torch.cat([prompt[-1:].expand(len(rows), 1), completion_ids[rows]], dim=1)
        attention = torch.cat([prompt_mask.new_ones(len(rows), prompt.size(0)), completion_mask[rows]], dim=1)
        labels = ids.masked_fill(attention[:, -ids.size(1) :] == 0, -100)
        out = model(input_ids=ids, attention_mask=attention, cache=cache, labels=labels, fused_lm_head=True)
        logps.append(out.log_probs)
        entropies.append(out.entropy)
        order.extend(rows)
    back = torch.argsort(torch.tensor(order))
    return torch.cat(logps)[back], None if any(e is None for e in entropies) else torch.cat(entropies)[back]


def generate_with_shared_prefixes(
    generate: Callable[..., torch.Tensor],
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    **options: Any,
) -> torch.Tensor:
    """`generate` as TRL calls it (left-padded prompts in, prompts and completions out, completions right-padded),
    each distinct prompt prefilled once for all its rows; sampling is generate's own."""
    pad = int(options["generation_config"].pad_token_id)
    written = []
    for prompt, rows in prompt_groups(input_ids, attention_mask):
        cache = prefix_cache(model, prompt, len(rows))
        repeated = prompt.expand(len(rows), -1)
        out = generate(input_ids=repeated, attention_mask=torch.ones_like(repeated), cache=cache, **options)
        written.append((rows, out[:, prompt.size(0) :]))
    width = max(new.size(1) for _, new in written)
    result = input_ids.new_full((input_ids.size(0), input_ids.size(1) + width), pad)
    result[:, : input_ids.size(1)] = input_ids
    for rows, new in written:
        result[rows, input_ids.size(1) : input_ids.size(1) + new.size(1)] = new
    return result


@contextlib.contextmanager
def shared_prefix_generation(model: Any) -> Iterator[None]:
    """Within the block, `model.generate` prefills each distinct prompt once (generate_with_shared_prefixes)."""
    generate = model.generate

    def shared(input_ids: torch.Tensor, attention_mask: torch.Tensor, **options: Any) -> torch.Tensor:
        return generate_with_shared_prefixes(generate, model, input_ids, attention_mask, **options)

    model.generate = shared
    try:
        yield
    finally:
        del model.generate


class SharedPrefixGRPOTrainer(GRPOTrainer):
    """TRL's GRPO trainer whose generation and log-probability passes compute each group's prompt once."""

    def _shares_prefixes(self) -> bool:
        """Text-only rollouts from transformers' generate, without gradient checkpointing (which drops caches)."""
        return not (self.use_vllm or self.use_transformers_continuous_batching or self.args.gradient_checkpointing)

    def _generate_single_turn(self, prompt_ids: Any, images: Any, multimodal_fields: Any, *rest: Any) -> Any:
        if not self._shares_prefixes() or images is not None or multimodal_fields:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *rest)
        with shared_prefix_generation(self.accelerator.unwrap_model(self.model_wrapped)):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *rest)

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if not self._shares_prefixes() or compute_aux_loss or any(v is not None for v in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        split = input_ids.size(1) - logits_to_keep
        with self.accelerator.autocast():
            logps, entropies = completion_logps(
                model, input_ids[:, :split], attention_mask[:, :split], input_ids[:, split:], attention_mask[:, split:]
            )
        return logps, entropies if compute_entropy else None, None
