"""Simulated workers and a simulated conductor: a testbed, not a model of any real LLM.

The server calls them on the direct path (sim_backend.py): the request built, retried, counted and priced as a
real model's is, without litellm's per-call machinery (2-4 ms of CPU per call on a 2-core machine, more than the
simulator itself), and without importing litellm: a sim pool's first run waits for no import of it. They are also
a litellm custom provider (`sim/<name>`, sim_litellm.py), for whoever calls litellm with a sim model (the
benchmarks' baselines). What they answer is decided by known numbers:

* a worker is right with its skill for the task's domain (adjusted for difficulty), the draw seeded from
  the whole prompt (task, worker, instruction, seen context) so every run is reproducible;
* a worker that sees earlier answers and is unsure of its own adopts the majority of those it sees;
* token counts follow the prompt length and the worker's verbosity, latency its speed, cost its price;
* the task's domain, difficulty, reference answer and choices travel in the task metadata, which only the
  simulator ever receives (see providers.py);
* a worker offered the client's tools calls the one its task names (sim_tools.py).

`sim/conductor` writes plausible workflows from the worker descriptions in its prompt: one step for easy
tasks, a planner/solver/verifier or fan-out/aggregate shape for hard ones, and malformed output at a
configurable rate to exercise the parser's repairs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from conductor_mcp.core import prompts
from conductor_mcp.core.pool import CONDUCTOR_ID as SELF
from conductor_mcp.core.records import messages_digest
from conductor_mcp.core.simulation import DIFFICULTY, SimConductorProfile, SimulationConfig, SimWorkerProfile
from conductor_mcp.models import sim_testbed as testbed
from conductor_mcp.models import sim_tools

PREFIX = "sim/"
ANSWER_LINE = re.compile(r"^ANSWER:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
UNSURE_SHARE = 0.6  # of a worker's wrong draws, the share in which it defers to the answers it sees
HARD_HINTS = re.compile(r"\b(prove|design|implement|refactor|debug|optimi[sz]e|architecture|step by step)\b", re.I)
DEFAULT_STEP_LIMIT = 4


SIM_CALL = "conductor_sim_call"  # the key of a SimCall in litellm's metadata


@dataclass(frozen=True)
class SimCall:
    """What a call to a sim model carries beside its messages (in litellm's metadata, never to a real provider):
    the task's reference data, its pool's simulation settings, and the server's override of the time scale. It
    travels as an object, not a dict, so a call costs no serialisation (benchmarks count this per step)."""

    reference: dict[str, Any] = field(default_factory=dict)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    time_scale: float | None = None
    call_log: Path | None = None


def is_simulated(model: str) -> bool:
    return model.startswith(PREFIX)


def _rng(*parts: str) -> random.Random:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def messages_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def token_count(text: str) -> int:
    return max(1, len(text) // 4)


# -------------------------------------------------------------------------------------------- workers


def worker_answer(name: str, profile: SimWorkerProfile, prompt: str, metadata: dict[str, Any]) -> tuple[str, int]:
    """The simulated worker's reply and its completion token count, deterministic in its inputs."""
    rng = _rng(name, prompt)
    shown, instruction = prompts.read_worker_prompt(prompt)
    difficulty = str(metadata.get("difficulty", "medium"))
    token_factor = DIFFICULTY.get(difficulty, DIFFICULTY["medium"])[0] if profile.longer_when_harder else 1.0
    focus = testbed.focused(instruction, metadata)
    skill, review_skill = testbed.skills(profile, str(metadata.get("domain", "general")), difficulty, focus)
    completion_tokens = max(1, int(profile.output_tokens * token_factor * rng.uniform(0.7, 1.3)))
    reference = metadata.get("answer")
    excerpt = " ".join(instruction.split())[:200]
    if reference is None:
        answer = "unknown (simulated worker: the task metadata has no reference answer)"
        return f"[{name}, simulated] Worked on: {excerpt}\nANSWER: {answer}", completion_tokens
    reference, task = str(reference), prompts.read_task(shown)
    seen = testbed.sealed_answers(shown, task)
    if review_skill is not None and seen and testbed.keeps_right_answer(review_skill, reference, seen, rng):
        return _reply_text(name, excerpt, "reviewed the answers shown", reference, task), completion_tokens
    if review_skill is not None:
        seen = []  # a reviewer that kept nothing solves alone: it cannot fix what it was not shown
    draw = rng.random()
    if draw < skill:
        answer, basis = reference, "solved it"
    elif seen and draw < skill + (1 - skill) * UNSURE_SHARE:
        answer, basis = _majority(seen), f"unsure, took the majority of {len(seen)} answers seen"
    else:
        answer, basis = _wrong_answer(reference, metadata.get("choices"), rng), "solved it"
    return _reply_text(name, excerpt, basis, answer, task), completion_tokens


def _reply_text(name: str, excerpt: str, basis: str, answer: str, task: str) -> str:
    """A simulated worker's reply: what it worked on, why, and its answer under the seal later steps check."""
    sealed = f"Seal: {testbed.seal(task, answer)}\nANSWER: {answer}"
    return f"[{name}, simulated] Worked on: {excerpt}\nBasis: {basis}.\n{sealed}"


def _majority(answers: list[str]) -> str:
    counts = Counter(answers)
    best = max(counts.values())
    return next(a for a in answers if counts[a] == best)  # ties go to the earliest answer seen


def _wrong_answer(reference: str, choices: Any, rng: random.Random) -> str:
    if isinstance(choices, list):
        wrong = [str(c) for c in choices if str(c) != reference]
        if wrong:
            return rng.choice(wrong)
    try:
        value = float(reference)
    except ValueError:
        return f"wrong-{rng.randint(1, 3)}"
    shifted = value + rng.choice([-2, -1, 1, 2, 10])
    return str(int(shifted)) if value.is_integer() else str(shifted)


# ------------------------------------------------------------------------------------------ conductor


def conductor_output(
    name: str,
    profile: SimConductorProfile,
    messages: list[dict[str, Any]],
    metadata: dict[str, Any],
    max_steps: int,
) -> str:
    """A plausible workflow for the task in the prompt, or a malformed one at the profile's rate."""
    system = next((str(m["content"]) for m in messages if m.get("role") == "system"), "")
    task = str(messages[-1].get("content", "")) if messages else ""
    rng = _rng(name, messages_text(messages))
    all_workers = prompts.read_workers(system)
    workers = [w for w in all_workers if w[0] != SELF]
    if not workers:
        return "I cannot see any workers in the prompt, so I cannot write a workflow."
    can_recurse = len(workers) < len(all_workers)
    domain = str(metadata.get("domain", "general"))
    difficulty = metadata.get("difficulty") or ("hard" if len(task) > 400 or HARD_HINTS.search(task) else "easy")
    ranked = sorted(workers, key=lambda w: -_affinity(w[1], domain))
    best = ranked[0][0]
    work = prompts.read_correction_work(task)
    if profile.style == "testbed" and work is None:
        workflow = testbed.scripted_workflow(workers, metadata, max_steps)
        return _malformed(workflow, rng) if rng.random() < profile.malformed_rate else json.dumps(workflow)
    if work is not None:
        steps, reasoning = _correction(work, ranked, domain, profile, can_recurse)
    elif profile.always_recurse and can_recurse:
        steps = [(best, f"Solve this {domain} task and state the final answer.", []), (SELF, "Check it.", "all")]
        reasoning = "Solve, then check my own team's work."
    elif difficulty == "easy" or max_steps < 3:
        steps = [(best, f"Solve this {domain} task and state the final answer.", [])]
        reasoning = f"An easy {domain} task: one call to the strongest {domain} worker."
    elif rng.random() < 0.5:
        helper = ranked[1][0] if len(ranked) > 1 else best
        steps = [
            (helper, "Break the task into the key sub-problems and outline an approach. Do not solve it.", []),
            (best, f"Follow the outline and solve the {domain} task. State the final answer.", [0]),
            (helper, "Check the solution step by step; correct any error and state the final answer.", [0, 1]),
        ]
        reasoning = f"A hard {domain} task: plan, solve with the strongest worker, then verify."
    else:
        solvers = [w[0] for w in ranked[: min(3, max_steps - 1)]]
        steps = [(w, f"Solve the {domain} task independently and state the final answer.", []) for w in solvers]
        steps: list[tuple[str, str, Any]] = steps
        steps.append((best, "Compare the candidate answers, resolve disagreements and state the final answer.", "all"))
        reasoning = f"A hard {domain} task: independent attempts in parallel, then an aggregator."
    if can_recurse and work is None and difficulty != "easy" and rng.random() < profile.recursion_rate:
        steps = [*steps[: max_steps - 1], (SELF, "Check the team's work; correct it or stop.", "all")]
    workflow = {
        "reasoning": reasoning,
        "steps": [{"worker": w, "instruction": i, "access": a} for w, i, a in steps[:max_steps]],
    }
    if rng.random() < profile.malformed_rate:
        return _malformed(workflow, rng)
    return json.dumps(workflow)


def _correction(
    work: str, ranked: list[tuple[str, str]], domain: str, profile: SimConductorProfile, can_recurse: bool
) -> tuple[list[tuple[str, str, Any]], str]:
    """As a worker: stop when the answers it sees agree, else two fresh attempts and an aggregator."""
    if profile.always_recurse and can_recurse:
        return [(SELF, "Check again.", "all")], "Never satisfied: look again."
    seen = ANSWER_LINE.findall(work)
    if len(seen) >= 2 and Counter(seen).most_common(1)[0][1] * 3 >= 2 * len(seen):
        return [], f"{len(seen)} answers, a clear majority agrees: the answer stands."
    answered = set(re.findall(r"\[([^,\]]+), simulated\]", work))
    fresh = [w for w in ranked if w[0] not in answered] or ranked  # second opinions from workers not yet heard
    first, second = fresh[0][0], (fresh[1][0] if len(fresh) > 1 else fresh[0][0])
    return [
        (first, f"Solve the {domain} task again, carefully, and state the final answer.", []),
        (second, f"Solve the {domain} task independently and state the final answer.", []),
        (first, "Compare the answers, resolve disagreements and state the final answer.", "all"),
    ], "The answers so far are unconfirmed: two fresh attempts and an aggregator."


def _affinity(description: str, domain: str) -> int:
    text = description.lower()
    return 2 * text.count(f"strongest at {domain}") + text.count(domain)


def _malformed(workflow: dict[str, Any], rng: random.Random) -> str:
    """The kinds of faults real conductors make: each is either repaired or reported by the parser."""
    steps = workflow["steps"]
    kind = rng.choice(["lists", "truncated", "unknown_worker", "forward_access", "near_miss_id", "prose"])
    if kind == "lists":
        return (
            f"{workflow['reasoning']}\n\nmodel_id = {[s['worker'] for s in steps]!r}\n"
            f"subtasks = {[s['instruction'] for s in steps]!r}\naccess_list = {[s['access'] for s in steps]!r}"
        )
    if kind == "truncated":
        text = json.dumps(workflow)
        return text[: len(text) // 2]
    if kind == "unknown_worker":
        steps[0]["worker"] = "gpt-7-ultra"
    elif kind == "forward_access":
        steps[0]["access"] = [len(steps) + 1]
    elif kind == "near_miss_id":
        steps[-1]["worker"] = steps[-1]["worker"].replace("_", " ").title()
    else:
        return "Let me think about which workers to use. The task seems to need careful work."
    return json.dumps(workflow)


def _max_steps(optional_params: dict[str, Any], system: str) -> int:
    schema = (optional_params.get("response_format") or {}).get("json_schema", {}).get("schema") or (
        optional_params.get("response_format") or {}
    ).get("schema")
    if isinstance(schema, dict):
        limit = schema.get("properties", {}).get("steps", {}).get("maxItems")
        if isinstance(limit, int):
            return limit
    return prompts.read_step_limit(system) or DEFAULT_STEP_LIMIT


# ------------------------------------------------------------------------------------------- provider


@dataclass
class SimReply:
    """What a sim model answered: its text (None when it asks for tool calls instead), the calls, and usage."""

    text: str | None
    calls: list[tuple[str, str]]
    prompt_tokens: int
    completion_tokens: int


async def answer(model: str, messages: list[dict[str, Any]], call: SimCall, params: dict[str, Any]) -> SimReply:
    """Answer one call to `model` (`sim/<name>` or `<name>`) after its simulated latency; `params` are the call's
    arguments (its response format and the client's tools are read). Both ways to a sim model share it: the
    litellm provider (sim_litellm.py) and the backend's direct path (sim_backend.py)."""
    text, completion_tokens, latency = _reply(model.removeprefix(PREFIX), messages, call, params)
    calls = sim_tools.requested_calls(messages, params.get("tools"))
    scale = call.simulation.time_scale if call.time_scale is None else call.time_scale
    if latency * scale > 0:
        await asyncio.sleep(latency * scale)
    if call.call_log is not None:
        _log_call(call.call_log, model, messages)
    text += sim_tools.quoted_results(messages)
    return SimReply(None if calls else text, calls, token_count(messages_text(messages)), completion_tokens)


def response(reply: SimReply) -> SimpleNamespace:
    """A reply in the shape backends read a chat completion (as openai_http.parsed makes one), without litellm."""
    calls = [
        SimpleNamespace(id=f"sim_{n}", type="function", function=SimpleNamespace(name=name, arguments=args))
        for n, (name, args) in enumerate(reply.calls)
    ]
    message = SimpleNamespace(role="assistant", content=reply.text, tool_calls=calls or None)
    choice = SimpleNamespace(index=0, message=message, text=reply.text, finish_reason=finish_reason(reply))
    usage = SimpleNamespace(
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        total_tokens=reply.prompt_tokens + reply.completion_tokens,
    )
    return SimpleNamespace(choices=[choice], usage=usage)


def finish_reason(reply: SimReply) -> str:
    return "tool_calls" if reply.calls else "stop"


def _reply(
    name: str, messages: list[dict[str, Any]], call: SimCall, optional_params: dict[str, Any]
) -> tuple[str, int, float]:
    """The sim model's text, completion tokens and unscaled latency: a conductor's workflow or a worker's answer."""
    if name in call.simulation.conductors or name == "conductor":
        conductor = call.simulation.conductors.get(name, SimConductorProfile())
        system = next((str(m["content"]) for m in messages if m.get("role") == "system"), "")
        text = conductor_output(name, conductor, messages, call.reference, _max_steps(optional_params, system))
        tokens = token_count(text)
        return text, tokens, conductor.first_token_s + tokens / conductor.tokens_per_s
    worker = call.simulation.workers.get(name, SimWorkerProfile())
    text, tokens = worker_answer(name, worker, messages_text(messages), call.reference)
    return text, tokens, worker.first_token_s + tokens / worker.tokens_per_s


def _log_call(path: Path, model: str, messages: list[dict[str, Any]]) -> None:
    """Append the completed call (model, digest of its messages) to the server's sim call log.

    Tests use it as the provider's own record of what it answered, e.g. to prove that resuming an
    interrupted run calls no finished step again.
    """
    line = json.dumps({"model": model, "digest": messages_digest(messages)}) + "\n"
    with path.open("a", encoding="utf-8") as log_file:  # one short append: atomic between processes
        log_file.write(line)


def final_answer(text: str | None) -> str:
    """The simulator's answer in a reply: the last ANSWER line."""
    found = ANSWER_LINE.findall(text or "")
    return found[-1].strip() if found else ""
