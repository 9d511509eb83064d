"""The Conductor: prompt, constrained call, parse, repair, one retry, and a safe fallback.

The system message (pool description, format, examples) depends only on the pool and the step limit, so
it is byte-identical across tasks and vLLM's prefix cache serves it; the task comes last. Any litellm model
can conduct ("prompted conductor"); a GRPO-trained one on vLLM uses the same code with its own settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from conductor_mcp import providers
from conductor_mcp.logs import get_logger
from conductor_mcp.pool import CONDUCTOR_ID, ConductorSpec, Pool
from conductor_mcp.transcript import ConductorCall, Run
from conductor_mcp.workflow import (
    WORK_SO_FAR,
    Repair,
    Step,
    Workflow,
    WorkflowError,
    parse_workflow,
    validate_workflow,
    workflow_json_schema,
)

log = get_logger(__name__)

FALLBACK_INSTRUCTION = "Solve the task completely and state the final answer clearly."
CORRECTION_REQUEST = (
    "Write a corrective workflow for the team (it runs after the work above), or reply with an empty steps "
    "list if the current answer stands."
)
CONDUCTOR_DESCRIPTION = (
    "You, the Conductor, as a worker: you read the instructions and answers of the steps in your access list, "
    "then write a corrective workflow for the team or stop when the answer stands. Use it to check and repair."
)


def system_prompt(pool: Pool, max_steps: int) -> str:
    """Everything that does not depend on the task, in a stable order (the prompt-cache prefix).

    The pool's `conductor.prompt` picks the full prompt (rules and two worked examples) or the compact one a
    small trained conductor learned on: a conductor must be served with the prompt it was trained with.
    """
    ids = pool.visible_ids()
    lines = [f"- {vid}: {' '.join(w.description.split())}" for vid, w in zip(ids, pool.workers, strict=True)]
    if pool.recursion:
        lines.append(f"- {CONDUCTOR_ID}: {CONDUCTOR_DESCRIPTION}")
    workers = "\n".join(lines)
    if pool.conductor.prompt == "compact":
        return (
            "You are the Conductor: write a workflow that a team of AI workers carries out.\n"
            f"Workers:\n{workers}\n"
            'Reply with one JSON object: {"reasoning": "...", "steps": [{"worker": "<worker id>", "instruction": '
            '"<what that worker must do>", "access": <[] for only the task, earlier step numbers such as [0], or '
            f'"all">}}]}}. At most {max_steps} steps; the last step\'s answer is the final answer.\n'
            f"Example:\n{json.dumps(_one_step_example(ids[0]))}\n"
        )
    first, second = ids[0], ids[min(1, len(ids) - 1)]
    easy = _one_step_example(first)
    hard = {
        "reasoning": "A hard problem: two independent attempts, then a careful reviewer who sees both.",
        "steps": [
            {
                "worker": first,
                "instruction": "Solve the problem step by step and state the final answer.",
                "access": [],
            },
            {
                "worker": second,
                "instruction": "Solve the problem independently and state the final answer.",
                "access": [],
            },
            {
                "worker": first,
                "instruction": "Compare both solutions, find and fix any error, and state the final answer.",
                "access": "all",
            },
        ],
    }
    return (
        "You are the Conductor. You do not solve tasks yourself: you write a short workflow that a team of AI "
        "workers carries out.\n\n"
        "## Workers\n"
        f"{workers}\n\n"
        "## How to write a workflow\n"
        'Reply with one JSON object: {"reasoning": "...", "steps": [{"worker": "...", "instruction": "...", '
        '"access": ...}]}.\n'
        f"- Use at most {max_steps} steps. Steps are numbered from 0 in the order you write them.\n"
        "- worker: one of the worker ids above.\n"
        "- instruction: what that worker must do, written for it; be specific about the part of the task it owns.\n"
        "- access: which earlier steps the worker sees (their instructions and answers): [] for none (only the "
        'task), a list of step numbers such as [0, 2], or "all" for every earlier step.\n'
        "- Steps that do not see each other run in parallel.\n"
        "- The answer of the last step is the final answer, so the last step must produce a complete answer.\n"
        "- Use one step for easy tasks and more only when they help: every step costs time and money.\n\n"
        "## Examples\n"
        f"Task: What is the boiling point of water at sea level in Celsius?\n{json.dumps(easy)}\n\n"
        f"Task: Prove that the square root of 2 is irrational.\n{json.dumps(hard)}\n"
    )


def _one_step_example(worker: str) -> dict[str, Any]:
    return {
        "reasoning": "A short factual question: one capable worker is enough.",
        "steps": [{"worker": worker, "instruction": "Answer the question and state the final answer.", "access": []}],
    }


def task_prompt(task: str, context: str | None) -> str:
    text = f"Task:\n{task}"
    if context:
        text += f"\n\nContext provided with the task (every worker sees it too):\n{context}"
    return text


def response_format(spec: ConductorSpec, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema in the form the backend takes (FACTS: llama.cpp rejects type json_schema)."""
    if spec.structured_output == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "workflow", "schema": schema, "strict": True}}
    if spec.structured_output == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


@dataclass
class Plan:
    """The outcome of asking the conductor: always a runnable workflow, and how it was obtained."""

    workflow: Workflow
    calls: list[ConductorCall] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    fallback_reason: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list, repr=False)


async def plan_workflow(
    pool: Pool, task: str, context: str | None, max_steps: int, metadata: dict[str, Any] | None = None
) -> Plan:
    """Ask the conductor for a workflow; retry once with the error shown; else fall back to one step."""
    messages = [
        {"role": "system", "content": system_prompt(pool, max_steps)},
        {"role": "user", "content": task_prompt(task, context)},
    ]
    plan = await _ask(pool, messages, max_steps, allow_empty=False, metadata=metadata)
    if plan.fallback_reason is None:
        return plan
    default = pool.visible_id(pool.default_worker or pool.workers[0].id)
    log.warning("conductor_fallback", reason=plan.fallback_reason, worker=default)
    plan.workflow = Workflow(
        reasoning=f"Fallback: {plan.fallback_reason}",
        steps=[Step(worker=default, instruction=FALLBACK_INSTRUCTION, access=[])],
    )
    return plan


async def plan_correction(
    pool: Pool,
    task: str,
    context: str | None,
    seen: list[tuple[str, str]],
    instruction: str,
    max_steps: int,
    metadata: dict[str, Any] | None = None,
) -> Plan:
    """The conductor as a worker: it reads the (instruction, answer) pairs it may see and writes a corrective
    workflow, or an empty one meaning the current answer stands. If it cannot answer usably, the answer stands.
    """
    work = "\n\n".join(
        f"### Step {i}: {step_instruction}\n{answer}" for i, (step_instruction, answer) in enumerate(seen)
    )
    messages = [
        {"role": "system", "content": system_prompt(pool, max_steps)},
        {
            "role": "user",
            "content": f"{task_prompt(task, context)}\n\n{WORK_SO_FAR}\n{work or '(no steps yet)'}\n\n"
            f"## Your instruction as a worker\n{instruction}\n\n{CORRECTION_REQUEST}",
        },
    ]
    plan = await _ask(pool, messages, max_steps, allow_empty=True, metadata=metadata)
    if plan.fallback_reason is not None:
        plan.workflow = Workflow(reasoning=f"No usable correction ({plan.fallback_reason}): the answer stands.")
    return plan


async def _ask(
    pool: Pool, messages: list[dict[str, Any]], max_steps: int, allow_empty: bool, metadata: dict[str, Any] | None
) -> Plan:
    """One conductor call with constrained output, parsed and validated; one retry showing the fault.

    On failure the plan's workflow is empty and `fallback_reason` says why; the caller decides the fallback.
    """
    ids = pool.offered_ids()
    schema = workflow_json_schema(ids, max_steps, pool.conductor.max_text_chars, allow_empty)
    calls: list[ConductorCall] = []
    error = "no attempt made"
    for attempt in range(2):
        call = ConductorCall(model=pool.conductor.model)
        calls.append(call)
        try:
            result = await providers.complete(
                pool.conductor,
                messages,
                label="conductor",
                metadata=metadata,
                response_format=response_format(pool.conductor, schema),
            )
        except providers.ProviderError as exc:
            call.error = str(exc)
            call.attempts = exc.attempts
            error = f"conductor call failed: {exc}"
            break  # retries already happened inside the provider; asking again would not help
        call.raw_output = result.text
        call.prompt_tokens, call.completion_tokens = result.prompt_tokens, result.completion_tokens
        call.cost_usd, call.latency_s, call.attempts = result.cost_usd, result.latency_s, result.attempts
        try:
            workflow, repairs = validate_workflow(parse_workflow(result.text), ids, max_steps, allow_empty)
        except WorkflowError as exc:
            call.error = str(exc)
            error = f"unusable workflow: {exc}"
            log.info("conductor_output_rejected", attempt=attempt + 1, error=str(exc))
            messages = [
                *messages[:2],
                {"role": "assistant", "content": result.text},
                {
                    "role": "user",
                    "content": f"That workflow could not be used: {exc}. Write the workflow again as "
                    "one JSON object in the format described, using only the listed worker ids.",
                },
            ]
            continue
        call.repairs = repairs
        return Plan(workflow=workflow, calls=calls, repairs=repairs, messages=messages[:2])
    return Plan(workflow=Workflow(), calls=calls, fallback_reason=error, messages=messages[:2])


def continuation_step(parent: Run, feedback: str) -> Step:
    """The conductor step a follow-up run adds after its parent's steps: it sees them all and the feedback."""
    assert parent.workflow is not None
    return Step(
        worker=CONDUCTOR_ID,
        instruction=f"The caller gave this feedback on the final answer: {feedback}\n"
        "Write a workflow that addresses the feedback, or stop if the answer already does.",
        access=list(range(len(parent.workflow.steps))),
    )


SELF_CHECK_INSTRUCTION = (
    "Check the team's work against the task. If the answer is wrong or incomplete, write a corrective workflow; "
    "if it stands, stop."
)
