"""Simulated task sets: the simulator's domains, reproducible tasks with reference answers (the dataset format)."""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SIM_DOMAINS = ("math", "code", "science", "general")
DIFFICULTY_MIX = (("easy", 0.4), ("medium", 0.3), ("hard", 0.3))


def task_set(n: int, seed: int = 0, domains: Sequence[str] = SIM_DOMAINS) -> list[dict[str, Any]]:
    """A reproducible set of simulated tasks (the dataset format: question, answer, type, domain, difficulty).

    Math answers are numbers, the rest multiple-choice letters; the questions carry no real content, since only
    the simulator answers them.
    """
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        domain = domains[i % len(domains)]
        difficulty = rng.choices([d for d, _ in DIFFICULTY_MIX], [w for _, w in DIFFICULTY_MIX])[0]
        hint = " Work step by step." if difficulty == "hard" else ""
        task: dict[str, Any] = {"id": f"sim-{seed}-{i}", "domain": domain, "difficulty": difficulty}
        if domain == "math":
            question = f"Simulated {difficulty} math problem #{i}: compute the value.{hint}"
            task |= {"type": "numeric", "answer": str(rng.randint(2, 999)), "question": question}
        else:
            question = f"Simulated {difficulty} {domain} question #{i}: choose A, B, C or D.{hint}"
            task |= {
                "type": "multiple_choice",
                "answer": rng.choice("ABCD"),
                "choices": list("ABCD"),
                "question": question,
            }
        tasks.append(task)
    return tasks


PITFALLS = ("units", "sign", "rounding", "negation", "edge case", "off-by-one")
STRUCTURED_MIX = (("easy", 0.5), ("hard", 0.5))


def structured_task_set(n: int, seed: int = 0, domains: Sequence[str] = SIM_DOMAINS) -> list[dict[str, Any]]:
    """Tasks of the structured testbed (models/sim_testbed.py): the question names domain, difficulty and pitfall,
    all a conductor needs to pick the specialist, the workflow's shape and what each worker must check."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        domain = domains[i % len(domains)]
        difficulty = rng.choices([d for d, _ in STRUCTURED_MIX], [w for _, w in STRUCTURED_MIX])[0]
        pitfall = rng.choice(PITFALLS)
        task: dict[str, Any] = {"id": f"tb-{seed}-{i}", "domain": domain, "difficulty": difficulty, "pitfall": pitfall}
        head = f"{difficulty.capitalize()} {domain} task #{i}. Pitfall: {pitfall}."
        tasks.append(_with_question(task, head, rng))
    return tasks


COMPOSED_DOMAINS = ("math", "code", "science", "general", "law", "medicine")
COMPOSED_DIFFICULTIES = ("easy", "medium", "hard", "expert")
COMPOSED_PITFALLS = (
    *PITFALLS,
    "overflow",
    "precedence",
    "ambiguity",
    "base rate",
    "double counting",
    "time zone",
)
HELD_OUT_SHARE = 4  # one template in this many is held out: never drawn for training


def template_of(task: dict[str, Any]) -> tuple[str, str, str]:
    """A composed task's template: (domain, difficulty, pitfall)."""
    return task["domain"], task["difficulty"], task["pitfall"]


def held_out_template(template: tuple[str, str, str]) -> bool:
    """Whether a (domain, difficulty, pitfall) template belongs to the held-out split (a fixed hash, no seed)."""
    digest = hashlib.sha256("\x1f".join(template).encode()).digest()
    return digest[0] % HELD_OUT_SHARE == 0


def composed_templates(held_out: bool) -> list[tuple[str, str, str]]:
    """Every template of one split: the composed space is 6 domains x 4 difficulties x 12 pitfalls = 288."""
    every = itertools.product(COMPOSED_DOMAINS, COMPOSED_DIFFICULTIES, COMPOSED_PITFALLS)
    return [t for t in every if held_out_template(t) == held_out]


def composed_task_set(
    n: int, seed: int = 0, domains: Sequence[str] = COMPOSED_DOMAINS, held_out: bool = False
) -> list[dict[str, Any]]:
    """Tasks of the composed testbed (pool sim-composed): domain, difficulty and pitfall drawn independently from
    the templates of one split, so no held-out task shares a template, a question or a draw with a training task.

    Training questions are numbered `train-SEED-i`, held-out ones `held-out-SEED-i`: the texts differ, and the
    simulator seeds every draw by the prompt text, so the two splits never share a draw either.
    """
    rng = random.Random(f"composed:{held_out}:{seed}")
    templates = [t for t in composed_templates(held_out) if t[0] in domains]
    split = "held-out" if held_out else "train"
    tasks = []
    for i in range(n):
        domain, difficulty, pitfall = rng.choice(templates)
        task_id = f"{split}-{seed}-{i}"
        task: dict[str, Any] = {"id": task_id, "domain": domain, "difficulty": difficulty, "pitfall": pitfall}
        head = f"{difficulty.capitalize()} {domain} task {task_id}. Pitfall: {pitfall}."
        tasks.append(_with_question(task, head, rng))
    return tasks


HELD_OUT_MARK = "(held out) "


def held_out_set(name: str, n: int, seed: int, domains: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The held-out tasks of a sim set: the composed sets' held-out templates, or (plain, structured) another
    seed's tasks marked as held out in id and question. Those sets number their questions by position, not seed, so
    unmarked they repeated training questions (9 of the structured set's 128 with seed 1), and the simulator, which
    seeds its draws by the prompt, drew the same outcomes for them."""
    if name in COMPOSED_SETS:
        return composed_task_set(n, seed, domains or COMPOSED_DOMAINS, held_out=True)
    tasks = SIM_SETS[name](n, seed + 1, *([domains] if domains else []))
    return [t | {"id": f"held-out-{t['id']}", "question": HELD_OUT_MARK + t["question"]} for t in tasks]


@dataclass(frozen=True)
class SetRules:
    """What a sim set decides beside its tasks. `specialist_share`: the share of sub-pools drawn with the task's
    specialist in them (None: sub-pools ignore the task, and hold it k times in n); `cost_scale_usd`: the cost
    at which the reward's cost term is full (rewards.reward_of)."""

    specialist_share: float | None = None
    cost_scale_usd: float = 0.01


COMPOSED_SETS = ("composed", "composed-v2", "composed-v3")
SIM_SETS = {"plain": task_set, "structured": structured_task_set, **dict.fromkeys(COMPOSED_SETS, composed_task_set)}
SET_DOMAINS = {"plain": SIM_DOMAINS, "structured": SIM_DOMAINS, **dict.fromkeys(COMPOSED_SETS, COMPOSED_DOMAINS)}
SET_RULES = {  # pools sim-composed-v2 and sim-composed-v3
    "composed-v2": SetRules(specialist_share=0.85, cost_scale_usd=0.04),
    "composed-v3": SetRules(specialist_share=0.85, cost_scale_usd=0.012),
}


def rules_of(name: str | None) -> SetRules:
    """A sim set's rules (the defaults for datasets and the sets before composed-v2)."""
    return SET_RULES.get(name or "", SetRules())


def _with_question(task: dict[str, Any], head: str, rng: random.Random) -> dict[str, Any]:
    """The testbed task with its question for its domain (a number to compute, else A-D), answer drawn from `rng`."""
    if task["domain"] == "math":
        return task | {"type": "numeric", "answer": str(rng.randint(2, 999)), "question": f"{head} Compute the value."}
    return task | {
        "type": "multiple_choice",
        "answer": rng.choice("ABCD"),
        "choices": list("ABCD"),
        "question": f"{head} Choose A, B, C or D.",
    }
