"""A short supervised warm start before GRPO: the policy imitates the workflows a scripted sim conductor writes.

Gemma 3 270M, untrained, writes no parseable workflow for the compact prompt (its held-out reward is the
malformed 0), so GRPO alone has no signal to climb from within a CPU budget. A few TRL SFTTrainer steps on the
scripted conductor's completions for the same prompts teach it the JSON format and a workable policy; GRPO then
trains the same LoRA adapter on the reward (answer right, cost low). The warm start's targets come from the
pool's own sim conductor (models/sim.py), answering exactly the prompts the policy is trained on.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from conductor_mcp.core import prompts
from conductor_mcp.core.pool import Pool
from conductor_mcp.core.simulation import SimConductorProfile
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import comparison, decisions, subpools
from conductor_mcp.models import sim


def scripted_completion(pool: Pool, task: dict[str, Any], max_steps: int) -> str:
    """The pool's sim conductor's workflow for this task (what the warm start imitates)."""
    model = pool.conductor.model
    if not sim.is_simulated(model):
        raise RequestError(f"--sft-steps imitates a simulated conductor; pool {pool.name!r} uses {model!r}")
    name = model.removeprefix(sim.PREFIX)
    profile = (pool.simulation.conductors if pool.simulation else {}).get(name, SimConductorProfile())
    profile = profile.model_copy(update={"malformed_rate": 0.0})  # imitate well-formed workflows only
    messages = prompts.conductor_messages(pool, max_steps, task["question"], None)
    return sim.conductor_output(name, profile, messages, task, max_steps)


def sft_rows(
    rows: list[dict[str, Any]], pools: dict[str, Pool], max_steps: int, eos: str, first_step_too: bool = False
) -> list[dict[str, str]]:
    """Prompt-completion pairs: each GRPO prompt with the scripted conductor's answer, closed by EOS.

    With ``first_step_too``, a multi-step workflow's prompt is also paired with its first step alone. A warm start
    that copies one shape per task leaves every GRPO group of rollouts the same workflow, the same reward and no
    gradient; taught both shapes, the policy samples both, and GRPO chooses by reward.
    """
    pairs = []
    for row in rows:
        completion = scripted_completion(pools[row["pool_name"]], json.loads(row["task"]), max_steps)
        pairs.append({"prompt": row["prompt"], "completion": completion + eos})
        if first_step_too and (short := first_step_alone(completion)) != completion:
            pairs.append({"prompt": row["prompt"], "completion": short + eos})
    return pairs


def pairs(args: argparse.Namespace, rows: list[dict[str, Any]], pools: dict[str, Pool], eos: str) -> list[dict]:
    """The warm start's prompt-completion pairs: decisions (--warm-start format, specialist, roles; after the task's
    own difficulty with --completion assessed) or the scripted conductor's workflows."""
    makers = {"format": format_rows, "specialist": specialist_rows, "roles": roles_rows}
    if args.warm_start not in makers:
        return sft_rows(rows, pools, args.max_steps_per_workflow, eos, args.sft_first_step_too)
    made = makers[args.warm_start](rows, pools, eos, args.seed)
    if args.completion != "assessed":
        return made
    return [
        {**pair, "completion": decisions.assessed_completion(json.loads(row["task"]), pair["completion"])}
        for row, pair in zip(rows, made, strict=True)
    ]


def format_rows(rows: list[dict[str, Any]], pools: dict[str, Pool], eos: str, seed: int) -> list[dict[str, str]]:
    """Prompt-completion pairs that teach only the decisions format: for each prompt, random workers of its
    sub-pool, a random shape and random `+` flags (learning/decisions.py), closed by EOS. A policy warmed up on
    these knows how to write a workflow and nothing about which one is good: all it shows after GRPO is learned."""
    rng = random.Random(f"format warm start:{seed}")
    return [
        {"prompt": row["prompt"], "completion": f" {decisions.random_decisions(pools[row['pool_name']], rng)}{eos}"}
        for row in rows
    ]


def specialist_rows(rows: list[dict[str, Any]], pools: dict[str, Pool], eos: str, seed: int) -> list[dict[str, str]]:
    """Prompt-completion pairs whose first solver is the task's specialist where the sub-pool holds one (a random
    worker where it does not), the rest drawn as the format warm start draws them. A policy that copies these
    must read the workers' descriptions (the ids are permuted); shapes and flags are still random, left to GRPO.
    It asks whether the model can read the pool at all when it is shown what to pick."""
    rng = random.Random(f"specialist warm start:{seed}")
    pairs = []
    for row in rows:
        pool = pools[row["pool_name"]]
        specialist = subpools.specialist_of(pool, str(json.loads(row["task"])["domain"]))
        first = pool.visible_id_of(specialist) if specialist else rng.choice(pool.visible_ids())
        rest = decisions.random_decisions(pool, rng).split()[1:]
        completion = " ".join([f"{first}{rng.choice(['', '+'])}", *rest])
        pairs.append({"prompt": row["prompt"], "completion": f" {completion}{eos}"})
    return pairs


CASTS = {1: ("S",), 2: ("S", "R"), 3: ("S", "S", "R")}  # the scripted conductor's roles, by the workflow's length


def roles_rows(rows: list[dict[str, Any]], pools: dict[str, Pool], eos: str, seed: int) -> list[dict[str, str]]:
    """Prompt-completion pairs cast as the scripted conductor casts (the specialist solves, the reviewer reviews,
    as comparison.roles reads them from the descriptions) in a random shape, one to three steps, with random `+`
    flags. A policy that copies these reads the pool for both roles, and nothing in them ties the shape to the
    task: what shape pays on which task is left to GRPO. Recipe 2's warm start drew its later steps at random,
    so they cost more than they paid and GRPO learned to stop after the first."""
    rng = random.Random(f"roles warm start:{seed}")
    pairs = []
    for row in rows:
        pool = pools[row["pool_name"]]
        cast = comparison.roles(pool, str(json.loads(row["task"])["domain"]))
        steps = [f"{cast[role]}{rng.choice(['', '+'])}" for role in CASTS[rng.randint(1, decisions.MAX_DECISIONS)]]
        pairs.append({"prompt": row["prompt"], "completion": f" {' '.join(steps)}{eos}"})
    return pairs


def first_step_alone(completion: str) -> str:
    """The scripted workflow cut to its first step, written as the scripted conductor writes JSON."""
    workflow = json.loads(completion)
    return json.dumps({**workflow, "steps": workflow["steps"][:1]})


def warm_start(
    args: argparse.Namespace, tokenizer: Any, pairs: list[dict[str, str]], use_cpu: bool
) -> tuple[Any, list[float]]:
    """SFT a fresh LoRA adapter on the pairs; returns the PEFT model (GRPO continues it) and the losses."""
    from datasets import Dataset  # pyright: ignore[reportAttributeAccessIssue]  (Hugging Face's, not ours)
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        output_dir=str(Path(args.out) / "sft"),
        max_steps=args.sft_steps,
        learning_rate=args.sft_lr,
        per_device_train_batch_size=args.sft_batch,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        use_cpu=use_cpu,
        bf16=False,
        disable_tqdm=True,
        completion_only_loss=True,
        gradient_checkpointing=False,
        max_length=None,  # prompts carry one BOS (training.prompt_text), as in GRPO
    )
    trainer = SFTTrainer(
        model=args.base_model,
        args=config,
        train_dataset=Dataset.from_list(pairs),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=args.lora_r, lora_alpha=args.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
    )
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return trainer.model, losses
