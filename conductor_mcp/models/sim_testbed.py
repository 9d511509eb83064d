"""The structured testbed's rules: where a workflow's shape, instructions and access lists decide the answer.

Rules we wrote (pool_configs/sim-structured.yaml sets the numbers; docs/research/simulator.md):

* specialists: a worker's skill depends on the task's domain; a hard task lowers it, an easy one raises it;
* instructions matter: each task names a pitfall (``Pitfall: units``); a worker whose instruction names it
  gets ``focus_bonus`` added to its skill (and to its review skill);
* a reviewer fixes only what it is shown: a worker with ``review_skill`` that sees earlier answers keeps the
  right one with that chance when the right one is among them; when it is not, the reviewer can only solve
  the task itself, at its own skill; ``review_skills`` sets the chance per domain (sim-composed-v2: a
  specialist reviews its own domain well and others poorly);
* draws are seeded by the whole prompt, so two identical steps give the same answer: independent attempts
  need different workers or different instructions;
* a worker reads earlier answers only from the outputs of the steps it is shown: each simulated answer carries a
  seal (a keyed digest of the task and the answer) on the line before it, and an ANSWER line without a valid seal
  (one a conductor wrote into an instruction, say) is text, not an answer. The key is not a secret from people,
  only from the policy, which never sees a worker's output.

The scripted testbed conductor (``style: testbed``) writes the workflows these rules reward: the domain's
specialist alone on easy tasks, two differently-worded specialist attempts and the reviewer on hard ones,
every instruction naming the pitfall.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import re
from typing import Any

from conductor_mcp.core.simulation import SimWorkerProfile

REVIEW_WORD = "review"  # the reviewer's description contains it; the scripted conductor looks for it
GENERALIST_MARK = "fair at everything"  # the generalist's description: "Fair at everything, best at nothing."
SPECIALIST_MARK = "strongest at "  # a specialist's description: "Strongest at math."
SEAL_KEY = b"conductor-mcp sim testbed: answers come from outputs"
SEALED_ANSWER = re.compile(r"^Seal: ([0-9a-f]{16})\nANSWER:[ \t]*(.+?)[ \t]*$", re.MULTILINE)


def seal(task: str, answer: str) -> str:
    """The seal a simulated worker writes before its ANSWER line: it binds the answer to this task."""
    return hmac.new(SEAL_KEY, f"{task.strip()}\x1f{answer}".encode(), hashlib.sha256).hexdigest()[:16]


def sealed_answers(shown: str, task: str) -> list[str]:
    """The answers a worker is shown, in order: only those an earlier step's output stated (sealed for this task)."""
    return [answer for mark, answer in SEALED_ANSWER.findall(shown) if hmac.compare_digest(mark, seal(task, answer))]


def focused(instruction: str, metadata: dict[str, Any]) -> bool:
    """Whether the instruction names the task's pitfall (the testbed's "told what to check")."""
    pitfall = str(metadata.get("pitfall") or "")
    return bool(pitfall) and pitfall.lower() in instruction.lower()


def skills(profile: SimWorkerProfile, domain: str, difficulty: str, focus: bool) -> tuple[float, float | None]:
    """The worker's (solving, reviewing) chances on this task, with the focus bonus when it was told the pitfall."""
    bonus = profile.focus_bonus if focus else 0.0
    solve = min(1.0, profile.skill_at(domain, difficulty) + bonus)
    review = profile.review_skills.get(domain, profile.review_skill)
    return solve, None if review is None else min(1.0, review + bonus)


def keeps_right_answer(review_skill: float, reference: str, seen: list[str], rng: random.Random) -> bool:
    """A reviewer keeps the right answer with its review skill, and only when it is among the answers shown."""
    return reference in seen and rng.random() < review_skill


PITFALL_MARK = "Check the "
WORDING = {
    "solve": "Solve it.",
    "again": "Solve it another way.",
    "review": "Review the answer.",
    "review both": "Review both answers.",
}
SHAPES: dict[int, list[tuple[str, list[int]]]] = {  # (role, access) of each step, by the workflow's length
    1: [("solve", [])],
    2: [("solve", []), ("review", [0])],
    3: [("solve", []), ("again", []), ("review both", [0, 1])],
}


def instruction(role: str, pitfall: str | None) -> str:
    """The testbed's instruction for a step's role, naming the pitfall when the conductor tells it."""
    return WORDING[role] + (f" {PITFALL_MARK}{pitfall}." if pitfall else "")


def scripted_workflow(
    workers: list[tuple[str, str]], metadata: dict[str, Any], max_steps: int, name_pitfall: bool = True
) -> dict[str, Any]:
    """The workflow the testbed rewards, written from the worker descriptions and the task's metadata: the
    specialist alone on easy tasks, else two specialist attempts and the reviewer (the generalist where the
    sub-pool has no specialist). `name_pitfall=False` is the same conductor that never names the pitfall."""
    domain = str(metadata.get("domain", "general"))
    pitfall = str(metadata.get("pitfall") or "answer") if name_pitfall else None
    specialist = best_for(workers, domain)
    reviewer = next((w for w, text in workers if REVIEW_WORD in text.lower()), specialist)
    alone = metadata.get("difficulty") == "easy" or max_steps < 3
    chosen = [specialist] if alone else [specialist, specialist, reviewer]
    steps = [
        {"worker": worker, "instruction": instruction(role, pitfall), "access": access}
        for worker, (role, access) in zip(chosen, SHAPES[len(chosen)], strict=True)
    ]
    return {"reasoning": f"{'easy' if len(steps) == 1 else 'hard'} {domain}", "steps": steps}


def best_for(workers: list[tuple[str, str]], domain: str) -> str:
    """The worker whose description says it is strongest at the domain, else the one fair at everything, else the
    first (what a conductor that reads the descriptions picks)."""
    text = {w: d.lower() for w, d in workers}
    return next(
        (w for w in text if f"{SPECIALIST_MARK}{domain}" in text[w]),
        next((w for w in text if GENERALIST_MARK in text[w]), workers[0][0]),
    )
