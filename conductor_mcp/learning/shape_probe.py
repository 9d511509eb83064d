"""How likely a trained policy is to add steps after the first: the workflow shape GRPO chooses, read directly.

Greedy held-out workflows show only the likelier shape, so a policy can move a long way without one of them
changing. The probe teacher-forces a first step on each held-out task (the run's own prompts, from its card) and
reads the probability of the two ways the completion goes on. A JSON workflow: the pool's scripted first step,
then another step (`},`) or the end (`}]}`). The decisions encoding: the first solver as the scripted conductor
casts it, told the pitfall (`model_2+`; in the assessed encoding after the task's own difficulty), then another
decision (` model`) or the end (EOS). Per difficulty, so it
shows whether a policy's shape depends on the task. It compares the warm start with the GRPO adapter of one run
folder (tools/probe_shape.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import comparison, train_options, training, warm_start
from conductor_mcp.learning.decisions import ENCODINGS, assessed_completion
from conductor_mcp.service.catalogue import load_pool

CONTINUATIONS = {"another step": "},", "end": "}]}"}  # after the first step's `"access": [...]`
ANOTHER_DECISION = " model"  # how every later decision starts (decisions.DECISION, after a space)
ADAPTERS = {"warm start": "sft-adapter", "trained": "adapter"}


def run_args(run_dir: Path) -> argparse.Namespace:
    """The training run's arguments, from its card: the same held-out tasks, pool and prompts."""
    card_path = run_dir / "card.json"
    if not card_path.is_file():
        raise RequestError(f"{run_dir}: no card.json; give the --out folder of tools/train_conductor.py")
    recipe = json.loads(card_path.read_text())["recipe"]
    return argparse.Namespace(**{**recipe, "base_model": str(Path(recipe["base_model"]).expanduser()), "out": run_dir})


def continuation_probabilities(model: Any, tokenizer: Any, context: str, continuations: list[str]) -> list[float]:
    """P(continuation | context) for each text: the product of its tokens' probabilities, teacher-forced.

    Continuations that feed the model the same ids (every one-token continuation of a context) share a forward
    pass, and the LM head projects only the positions that predict a continuation's tokens.
    """
    import torch

    known = tokenizer(context)["input_ids"]
    scored: dict[tuple[int, ...], Any] = {}
    probabilities = []
    for text in continuations:
        ids = tokenizer(context + text)["input_ids"]
        if ids[: len(known)] != known:
            raise ValueError(f"{text!r} changes how the context before it tokenizes")
        inputs, written = tuple(ids[:-1]), ids[len(known) :]
        if inputs not in scored:
            with torch.no_grad():
                logits = model(
                    input_ids=torch.tensor([inputs], device=model.device), logits_to_keep=len(written)
                ).logits[0]
            scored[inputs] = torch.log_softmax(logits.float(), dim=-1)
        log_probs = scored[inputs]
        probabilities.append(float(log_probs[torch.arange(len(written)), torch.tensor(written)].sum().exp()))
    return probabilities


def probe(run_dir: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per adapter of the run and per task difficulty: mean P(another step), mean P(end), and how many tasks
    give another step the higher probability."""
    args = run_args(run_dir)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tasks = train_options.held_out_tasks(args)
    if not tasks:
        raise RequestError(f"{run_dir}: the run has no held-out tasks (--eval-tasks or --eval-dataset)")
    tokenizer = AutoTokenizer.from_pretrained(args.base_model)
    pool = load_pool(args.pool, [builtin_pool_dir()])
    rows, pools = training.build_rows(args, pool, tokenizer, tasks, len(tasks), 0, held_out=True)
    decisions = args.completion in ENCODINGS
    contexts = [
        row["prompt"]
        + (
            first_decision(pools[row["pool_name"]], task, args.completion == "assessed")
            if decisions
            else first_step_prefix(pools[row["pool_name"]], task, args.max_steps_per_workflow)
        )
        for row, task in zip(rows, tasks, strict=True)
    ]
    continuations = [ANOTHER_DECISION, tokenizer.eos_token] if decisions else list(CONTINUATIONS.values())
    report: dict[str, dict[str, dict[str, float]]] = {}
    for label, folder in ADAPTERS.items():
        if not (run_dir / folder).is_dir():
            continue
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(args.base_model), str(run_dir / folder))
        model.eval()
        by_difficulty: dict[str, list[list[float]]] = {}
        for context, task in zip(contexts, tasks, strict=True):
            pair = continuation_probabilities(model, tokenizer, context, continuations)
            by_difficulty.setdefault(str(task.get("difficulty") or "all"), []).append(pair)
        report[label] = {d: _summary(pairs) for d, pairs in sorted(by_difficulty.items())}
    if not report:
        raise RequestError(f"{run_dir}: no adapter to probe (expected {' or '.join(ADAPTERS.values())})")
    return report


def first_step_prefix(pool: Any, task: dict[str, Any], max_steps: int) -> str:
    """The scripted workflow's text up to the end of its first step, where the policy decides whether to go on."""
    one_step = warm_start.first_step_alone(warm_start.scripted_completion(pool, task, max_steps))
    return one_step.removesuffix(CONTINUATIONS["end"])


def first_decision(pool: Any, task: dict[str, Any], assessed: bool = False) -> str:
    """The decisions encoding's first decision as the scripted conductor casts it (the specialist, else the
    generalist), told the pitfall, after the task's own difficulty when `assessed`: after it the policy decides
    whether the task gets more than one step."""
    first = f" {comparison.roles(pool, str(task.get('domain')))['S']}+"
    return assessed_completion(task, first) if assessed else first


def _summary(pairs: list[list[float]]) -> dict[str, float]:
    more, end = [p[0] for p in pairs], [p[1] for p in pairs]
    return {
        "tasks": len(pairs),
        "another_step": sum(more) / len(pairs),
        "end": sum(end) / len(pairs),
        "tasks_another_step_likelier": sum(m > e for m, e in pairs),
    }


def table(report: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| adapter | difficulty | tasks | P(another step) | P(end) | tasks where another step is likelier |",
        "|---|---|---|---|---|---|",
    ]
    for label, rows in report.items():
        for difficulty, s in rows.items():
            lines.append(
                f"| {label} | {difficulty} | {s['tasks']:.0f} | {s['another_step']:.3f} | {s['end']:.3f} | "
                f"{s['tasks_another_step_likelier']:.0f} |"
            )
    return "\n".join(lines) + "\n"
