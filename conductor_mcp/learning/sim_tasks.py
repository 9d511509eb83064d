"""Simulated task sets: the simulator's domains, reproducible tasks with reference answers (the dataset format)."""

from __future__ import annotations

import random
from collections.abc import Sequence
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
        if domain == "math":
            task |= {"type": "numeric", "answer": str(rng.randint(2, 999)), "question": f"{head} Compute the value."}
        else:
            task |= {
                "type": "multiple_choice",
                "answer": rng.choice("ABCD"),
                "choices": list("ABCD"),
                "question": f"{head} Choose A, B, C or D.",
            }
        tasks.append(task)
    return tasks


SIM_SETS = {"plain": task_set, "structured": structured_task_set}
