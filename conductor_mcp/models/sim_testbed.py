"""The structured testbed's rules: where a workflow's shape, instructions and access lists decide the answer.

Rules we wrote (pool_configs/sim-structured.yaml sets the numbers; README "Structured simulator testbed"):

* specialists: a worker's skill depends on the task's domain; a hard task lowers it, an easy one raises it;
* instructions matter: each task names a pitfall (``Pitfall: units``); a worker whose instruction names it
  gets ``focus_bonus`` added to its skill (and to its review skill);
* a reviewer fixes only what it is shown: a worker with ``review_skill`` that sees earlier answers keeps the
  right one with that chance when the right one is among them; when it is not, the reviewer can only solve
  the task itself, at its own skill;
* draws are seeded by the whole prompt, so two identical steps give the same answer: independent attempts
  need different workers or different instructions.

The scripted testbed conductor (``style: testbed``) writes the workflows these rules reward: the domain's
specialist alone on easy tasks, two differently-worded specialist attempts and the reviewer on hard ones,
every instruction naming the pitfall.
"""

from __future__ import annotations

import random
from typing import Any

from conductor_mcp.core.simulation import SimWorkerProfile

REVIEW_WORD = "review"  # the reviewer's description contains it; the scripted conductor looks for it


def focused(instruction: str, metadata: dict[str, Any]) -> bool:
    """Whether the instruction names the task's pitfall (the testbed's "told what to check")."""
    pitfall = str(metadata.get("pitfall") or "")
    return bool(pitfall) and pitfall.lower() in instruction.lower()


def skills(profile: SimWorkerProfile, domain: str, difficulty: str, focus: bool) -> tuple[float, float | None]:
    """The worker's (solving, reviewing) chances on this task, with the focus bonus when it was told the pitfall."""
    bonus = profile.focus_bonus if focus else 0.0
    solve = min(1.0, profile.skill_at(domain, difficulty) + bonus)
    return solve, None if profile.review_skill is None else min(1.0, profile.review_skill + bonus)


def keeps_right_answer(review_skill: float, reference: str, seen: list[str], rng: random.Random) -> bool:
    """A reviewer keeps the right answer with its review skill, and only when it is among the answers shown."""
    return reference in seen and rng.random() < review_skill


def scripted_workflow(workers: list[tuple[str, str]], metadata: dict[str, Any], max_steps: int) -> dict[str, Any]:
    """The workflow the testbed rewards, written from the worker descriptions and the task's metadata."""
    domain = str(metadata.get("domain", "general"))
    pitfall = str(metadata.get("pitfall") or "answer")
    ranked = sorted(workers, key=lambda w: -w[1].lower().count(f"strongest at {domain}"))
    specialist = ranked[0][0]
    reviewer = next((w for w, text in workers if REVIEW_WORD in text.lower()), specialist)
    solve = {"worker": specialist, "instruction": f"Solve it. Check the {pitfall}.", "access": []}
    if metadata.get("difficulty") == "easy" or max_steps < 3:
        return {"reasoning": f"easy {domain}", "steps": [solve]}
    again = {"worker": specialist, "instruction": f"Solve it another way. Check the {pitfall}.", "access": []}
    check = {"worker": reviewer, "instruction": f"Review both answers. Check the {pitfall}.", "access": [0, 1]}
    return {"reasoning": f"hard {domain}", "steps": [solve, again, check]}
