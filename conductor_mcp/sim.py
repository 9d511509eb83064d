"""Simulated workers and a simulated conductor: a testbed, not a model of any real LLM.

They are served as a litellm custom provider (`sim/<name>`), so they travel exactly the call path real
models take: request building, retries, usage, cost. What they answer is decided by known numbers:

* a worker is right with its skill for the task's domain (adjusted for difficulty), the draw seeded from
  the whole prompt (task, worker, instruction, seen context) so every run is reproducible;
* a worker that sees earlier answers and is unsure of its own adopts the majority of those it sees;
* token counts follow the prompt length and the worker's verbosity, latency its speed, cost its price;
* the task's domain, difficulty, reference answer and choices travel in the task metadata, which only the
  simulator ever receives (see providers.py).

`sim/conductor` writes plausible workflows from the worker descriptions in its prompt: one step for easy
tasks, a planner/solver/verifier or fan-out/aggregate shape for hard ones, and malformed output at a
configurable rate to exercise the parser's repairs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import litellm
from litellm import CustomLLM
from pydantic import BaseModel, ConfigDict, Field

from conductor_mcp.pool import CONDUCTOR_ID as SELF
from conductor_mcp.transcript import messages_digest
from conductor_mcp.workflow import WORK_SO_FAR

PREFIX = "sim/"
ANSWER_LINE = re.compile(r"^ANSWER:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
UNSURE_SHARE = 0.6  # of a worker's wrong draws, the share in which it defers to the answers it sees
DIFFICULTY = {"easy": (0.5, 0.5), "medium": (1.0, 1.0), "hard": (2.0, 0.75)}  # (token factor, skill factor)
HARD_HINTS = re.compile(r"\b(prove|design|implement|refactor|debug|optimi[sz]e|architecture|step by step)\b", re.I)


class SimWorkerProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skills: dict[str, float] = Field(default_factory=dict, description="probability of a right answer per domain")
    default_skill: float = Field(0.5, ge=0, le=1)
    first_token_s: float = Field(0.3, ge=0)
    tokens_per_s: float = Field(80.0, gt=0)
    output_tokens: int = Field(300, ge=1, description="typical completion length on a medium task")
    difficulty_adjusted: bool = Field(
        True, description="easy tasks raise the skill and hard ones lower it; false keeps it exact (testbeds)"
    )

    def skill(self, domain: str) -> float:
        return min(1.0, max(0.0, self.skills.get(domain, self.default_skill)))

    def skill_at(self, domain: str, difficulty: str) -> float:
        """The chance of a right answer on a task of this domain and difficulty."""
        skill = self.skill(domain)
        if not self.difficulty_adjusted:
            return skill
        if difficulty == "easy":
            return skill + (1 - skill) * 0.5
        return skill * DIFFICULTY.get(difficulty, DIFFICULTY["medium"])[1]


class SimConductorProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    malformed_rate: float = Field(0.0, ge=0, le=1)
    recursion_rate: float = Field(0.0, ge=0, le=1, description="how often a hard workflow ends with itself")
    always_recurse: bool = Field(False, description="names itself every time: a conductor that never stops")
    first_token_s: float = Field(0.2, ge=0)
    tokens_per_s: float = Field(120.0, gt=0)


class SimulationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    time_scale: float = Field(1.0, ge=0, description="multiplies every latency; CONDUCTOR_SIM_TIME_SCALE overrides")
    workers: dict[str, SimWorkerProfile] = Field(default_factory=dict)
    conductors: dict[str, SimConductorProfile] = Field(default_factory=dict)


_config = SimulationConfig()


def configure(config: SimulationConfig) -> None:
    """Make a pool's profiles known to the provider (profiles are keyed by the name after 'sim/')."""
    _config.workers.update(config.workers)
    _config.conductors.update(config.conductors)
    _config.time_scale = config.time_scale


def is_simulated(model: str) -> bool:
    return model.startswith(PREFIX)


def time_scale() -> float:
    override = os.environ.get("CONDUCTOR_SIM_TIME_SCALE")
    return float(override) if override else _config.time_scale


def _rng(*parts: str) -> random.Random:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


# -------------------------------------------------------------------------------------------- workers


def worker_answer(name: str, profile: SimWorkerProfile, prompt: str, metadata: dict[str, Any]) -> tuple[str, int]:
    """The simulated worker's reply and its completion token count, deterministic in its inputs."""
    rng = _rng(name, prompt)
    instruction = prompt.rsplit("# Your instruction", 1)[-1].strip()
    difficulty = str(metadata.get("difficulty", "medium"))
    token_factor = DIFFICULTY.get(difficulty, DIFFICULTY["medium"])[0]
    skill = profile.skill_at(str(metadata.get("domain", "general")), difficulty)
    completion_tokens = max(1, int(profile.output_tokens * token_factor * rng.uniform(0.7, 1.3)))
    reference = metadata.get("answer")
    excerpt = " ".join(instruction.split())[:200]
    if reference is None:
        answer = "unknown (simulated worker: the task metadata has no reference answer)"
        return f"[{name}, simulated] Worked on: {excerpt}\nANSWER: {answer}", completion_tokens
    reference = str(reference)
    draw = rng.random()
    seen = ANSWER_LINE.findall(prompt.rsplit("# Your instruction", 1)[0])
    if draw < skill:
        answer, basis = reference, "solved it"
    elif seen and draw < skill + (1 - skill) * UNSURE_SHARE:
        answer, basis = _majority(seen), f"unsure, took the majority of {len(seen)} answers seen"
    else:
        answer, basis = _wrong_answer(reference, metadata.get("choices"), rng), "solved it"
    return f"[{name}, simulated] Worked on: {excerpt}\nBasis: {basis}.\nANSWER: {answer}", completion_tokens


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

_WORKER_LINE = re.compile(r"^- ([A-Za-z0-9][A-Za-z0-9_.\-]*): (.+)$", re.MULTILINE)


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
    rng = _rng(name, _text(messages))
    section = system.split("## Workers", 1)[-1].split("\n## ", 1)[0] if "## Workers" in system else ""
    all_workers = _WORKER_LINE.findall(section)
    workers = [w for w in all_workers if w[0] != SELF]
    if not workers:
        return "I cannot see any workers in the prompt, so I cannot write a workflow."
    can_recurse = len(workers) < len(all_workers)
    domain = str(metadata.get("domain", "general"))
    difficulty = metadata.get("difficulty") or ("hard" if len(task) > 400 or HARD_HINTS.search(task) else "easy")
    ranked = sorted(workers, key=lambda w: -_affinity(w[1], domain))
    best = ranked[0][0]
    if WORK_SO_FAR in task:
        steps, reasoning = _correction(task, ranked, domain, profile, can_recurse)
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
        steps.append((best, "Compare the candidate answers, resolve disagreements and state the final answer.", "all"))
        reasoning = f"A hard {domain} task: independent attempts in parallel, then an aggregator."
    if can_recurse and WORK_SO_FAR not in task and difficulty != "easy" and rng.random() < profile.recursion_rate:
        steps = [*steps[: max_steps - 1], (SELF, "Check the team's work; correct it or stop.", "all")]
    workflow = {
        "reasoning": reasoning,
        "steps": [{"worker": w, "instruction": i, "access": a} for w, i, a in steps[:max_steps]],
    }
    if rng.random() < profile.malformed_rate:
        return _malformed(workflow, rng)
    return json.dumps(workflow)


def _correction(
    task: str, ranked: list[tuple[str, str]], domain: str, profile: SimConductorProfile, can_recurse: bool
) -> tuple[list[tuple[str, str, Any]], str]:
    """As a worker: stop when the answers it sees agree, else two fresh attempts and an aggregator."""
    if profile.always_recurse and can_recurse:
        return [(SELF, "Check again.", "all")], "Never satisfied: look again."
    work = task.split(WORK_SO_FAR, 1)[1]
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
    match = re.search(r"at most (\d+) steps", system)
    return int(match.group(1)) if match else 4


# ------------------------------------------------------------------------------------------- provider


class SimProvider(CustomLLM):
    """litellm custom provider serving every `sim/<name>` model."""

    async def acompletion(
        self,
        model: str,
        messages: list,
        api_base: str,
        custom_prompt_dict: dict,  # type: ignore[override]
        model_response: litellm.ModelResponse,
        print_verbose: Any,
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict,
        acompletion: Any = None,
        litellm_params: dict | None = None,
        logger_fn: Any = None,
        headers: dict | None = None,
        timeout: Any = None,  # noqa: ASYNC109 (litellm's signature; the provider's own deadline applies)
        client: Any = None,
    ) -> litellm.ModelResponse:
        name = model.removeprefix(PREFIX)
        metadata = (litellm_params or {}).get("metadata") or {}
        prompt = _text(messages)
        if name in _config.conductors or name == "conductor":
            profile_c = _config.conductors.get(name, SimConductorProfile())
            system = next((str(m["content"]) for m in messages if m.get("role") == "system"), "")
            text = conductor_output(name, profile_c, messages, metadata, _max_steps(optional_params, system))
            completion_tokens = _tokens(text)
            latency = profile_c.first_token_s + completion_tokens / profile_c.tokens_per_s
        else:
            profile = _config.workers.get(name, SimWorkerProfile())
            text, completion_tokens = worker_answer(name, profile, prompt, metadata)
            latency = profile.first_token_s + completion_tokens / profile.tokens_per_s
        scaled = latency * time_scale()
        if scaled > 0:
            await asyncio.sleep(scaled)
        _log_call(model, messages)
        model_response.choices[0].message.content = text  # type: ignore[union-attr]
        model_response.choices[0].finish_reason = "stop"
        prompt_tokens = _tokens(prompt)
        model_response.usage = litellm.Usage(  # type: ignore[attr-defined]
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
        model_response.model = model
        return model_response


def _log_call(model: str, messages: list[dict[str, Any]]) -> None:
    """With CONDUCTOR_SIM_CALL_LOG set, append each completed call (model, digest of its messages) to that file.

    Tests use it as the provider's own record of what it answered, e.g. to prove that resuming an
    interrupted run calls no finished step again.
    """
    path = os.environ.get("CONDUCTOR_SIM_CALL_LOG")
    if path:
        line = json.dumps({"model": model, "digest": messages_digest(messages)}) + "\n"
        with open(path, "a", encoding="utf-8") as log_file:  # one short append: atomic between processes
            log_file.write(line)


_provider = SimProvider()


def register() -> None:
    """Serve `sim/*` through litellm (idempotent)."""
    if not any(entry.get("provider") == "sim" for entry in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": "sim", "custom_handler": _provider})


# ------------------------------------------------------------------------------------------- task set

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


def final_answer(text: str | None) -> str:
    """The simulator's answer in a reply: the last ANSWER line."""
    found = ANSWER_LINE.findall(text or "")
    return found[-1].strip() if found else ""
