"""The decisions encoding: a conductor that writes only its decisions, into a skeleton the trainer fills in.

A small policy on two CPU cores cannot afford 100-token JSON workflows per rollout, and most of those tokens
decide nothing. Here the prompt lists the workers and the task and ends in a prefilled `Steps:`; the policy
writes one to three decisions, each a worker id and an optional `+` (tell that worker the task's stated pitfall),
about 12 tokens in all:

    model_2+                       one step: model_2 solves, told the pitfall
    model_2 model_0+               two: model_2 solves, model_0 reviews its answer, told the pitfall
    model_2+ model_3+ model_0+     three: model_2 and model_3 solve independently, model_0 reviews both

The shape follows from the count and the instructions are the testbed's own wording (models/sim_testbed.py), so
every decision the policy can make is one a scripted conductor can also write; the reward path is the server's
(the filled-in workflow is parsed, validated and run like any other).

The assessed variant (`--completion assessed`) has the policy write how hard the task is before its decisions,
after a prefilled `Difficulty:`:

    hard. Steps: model_2+ model_3+ model_0

The word is the policy's own read of the task (the composed testbed's tasks state it); the reward ignores it and
runs the decisions alone. It is there because the shape that pays depends on the difficulty, and a 270M policy
reads one word of a long prompt slowly (recipes 5-7, tools/results/grpo-cpu-sim-composed-v3/RUN.md), while the
token it has just written itself sits next to the decision that needs it.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import PoolError
from conductor_mcp.learning.sim_tasks import COMPOSED_DIFFICULTIES
from conductor_mcp.models import sim_testbed as testbed

ENCODINGS = ("decisions", "assessed")  # the --completion values this module reads and writes
PREFILL = "Steps:"
ASSESSED_PREFILL = "Difficulty:"
STEPS_MARK = "Steps:"  # between the assessed difficulty and the decisions
MAX_DECISIONS = 3
DECISION = re.compile(r"^(model_\d+)(\+?)$")
ASSESSMENT = re.compile(rf"^\s*({'|'.join(COMPOSED_DIFFICULTIES)})\.\s+{STEPS_MARK}(\s.*)$", re.DOTALL)
STEPS_RULES = (
    "one to three steps, each a worker id, with + after it to tell that worker the task's pitfall. "
    "One step: that worker solves. Two: the first solves, the second reviews its answer. Three: the first two "
    "solve independently, the third reviews both."
)
SYSTEM = (
    "You are the Conductor: choose which workers solve the task.\nWorkers:\n{workers}\n"
    f"Write {STEPS_RULES}\nExample: Steps: model_1+ model_0"
)
ASSESSED_SYSTEM = (
    "You are the Conductor: choose which workers solve the task.\nWorkers:\n{workers}\n"
    f"First write how hard the task is ({', '.join(COMPOSED_DIFFICULTIES)}), then {STEPS_RULES}\n"
    "Example: Difficulty: medium. Steps: model_1+ model_0"
)


def messages(pool: Pool, question: str, assessed: bool = False) -> list[dict[str, str]]:
    """The conductor's prompt in the decisions encoding (the trainer appends PREFILL, or ASSESSED_PREFILL, after
    the chat template)."""
    workers = "\n".join(f"- {i}: {w.description}" for i, w in zip(pool.visible_ids(), pool.workers, strict=True))
    system = ASSESSED_SYSTEM if assessed else SYSTEM
    return [{"role": "system", "content": system.format(workers=workers)}, {"role": "user", "content": question}]


def prefill(assessed: bool) -> str:
    return ASSESSED_PREFILL if assessed else PREFILL


def assessment(text: str) -> tuple[str, str] | None:
    """An assessed completion's difficulty and the decisions after it, or None when it does not start with one of
    the difficulties, a full stop and `Steps:`."""
    found = ASSESSMENT.match(text)
    return None if found is None else (found[1], found[2])


def assessed_completion(task: dict[str, Any], text: str) -> str:
    """Decisions written after the task's own difficulty (what the warm start teaches the policy to copy)."""
    return f" {task['difficulty']}. {STEPS_MARK} {text.strip()}"


def parse(text: str, offered: list[str], assessed: bool = False) -> list[tuple[str, bool]] | None:
    """The decisions in a completion, or None when it is not one to three decisions naming offered workers (after
    an assessment of the task's difficulty, when `assessed`)."""
    if assessed:
        found = assessment(text)
        if found is None:
            return None
        text = found[1]
    words = text.strip().split()
    if not 1 <= len(words) <= MAX_DECISIONS:
        return None
    decisions = []
    for word in words:
        found = DECISION.match(word)
        if found is None or found[1] not in offered:
            return None
        decisions.append((found[1], found[2] == "+"))
    return decisions


def workflow(decisions: list[tuple[str, bool]], task: dict[str, Any]) -> dict[str, Any]:
    """The workflow the decisions stand for, as the JSON a conductor writes."""
    pitfall = str(task.get("pitfall") or "answer")
    roles = testbed.SHAPES[len(decisions)]
    steps = [
        {"worker": worker, "instruction": testbed.instruction(role, pitfall if told else None), "access": access}
        for (worker, told), (role, access) in zip(decisions, roles, strict=True)
    ]
    return {"reasoning": f"decisions: {len(decisions)} step(s)", "steps": steps}


def completion_workflow(text: str, pool: Pool, task: dict[str, Any], assessed: bool = False) -> str:
    """The completion as the workflow JSON the reward runs; the text itself when it is not well formed (the
    server's parser then rejects it: the malformed reward)."""
    decisions = parse(text, pool.visible_ids(), assessed)
    return json.dumps(workflow(decisions, task)) if decisions else text


def random_decisions(pool: Pool, rng: random.Random) -> str:
    """A random well-formed completion (the format-only warm start): random workers, shape and `+` flags."""
    count = rng.randint(1, MAX_DECISIONS)
    return " ".join(f"{rng.choice(pool.visible_ids())}{rng.choice(['', '+'])}" for _ in range(count))


def signature(pool: Pool, written: dict[str, Any], real_ids: bool = True) -> str:
    """A workflow as its decisions over the pool's own worker ids (`generalist+ reviewer`), comparable across
    sub-pools whose visible ids differ, or (not `real_ids`) over the ids the conductor saw (`model_2+ model_0`);
    workflows outside the encoding are marked as such."""
    words = []
    for step in written.get("steps", []):
        try:
            worker = pool.resolve(step["worker"]).id if real_ids else str(step["worker"])
        except (PoolError, KeyError, TypeError):  # not a step of this pool's workers
            return "outside the encoding"
        pitfall_told = testbed.PITFALL_MARK in str(step.get("instruction", ""))
        words.append(worker + ("+" if pitfall_told else ""))
    return " ".join(words)
