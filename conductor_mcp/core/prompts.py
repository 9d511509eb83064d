"""Every prompt the server writes, and the readers of the markers in them.

The conductor's system message depends only on the pool and the step limit, so it is byte-identical across
tasks and vLLM's prefix cache serves it; the task comes last. Workers get one user message: the task, the
caller's context, the (instruction, answer) pairs of the steps in their access list, their own instruction.

The simulator reads these prompts as a model would read them (which workers exist, how many steps are
allowed, what it was told to do, what it was shown). It does so only through the readers below, which sit
beside the text they read, so an edit of a prompt cannot silently break the simulator: tests render every
prompt and read it back.
"""

from __future__ import annotations

import json
import re
from typing import Any

from conductor_mcp.core.agent_records import StepWork
from conductor_mcp.core.limits import MAX_SEEN_OUTPUT_CHARS
from conductor_mcp.core.pool import CONDUCTOR_ID, Pool
from conductor_mcp.core.workflow import Step, Workflow

FALLBACK_INSTRUCTION = "Solve the task completely and state the final answer clearly."
CORRECTION_REQUEST = (
    "Write a corrective workflow for the team (it runs after the work above), or reply with an empty steps "
    "list if the current answer stands."
)
CONDUCTOR_DESCRIPTION = (
    "You, the Conductor, as a worker: you read the instructions and answers of the steps in your access list, "
    "then write a corrective workflow for the team or stop when the answer stands. Use it to check and repair."
)
SELF_CHECK_INSTRUCTION = (
    "Check the team's work against the task. If the answer is wrong or incomplete, write a corrective workflow; "
    "if it stands, stop."
)

# Markers: headings the readers below (and nothing else) look for.
WORKERS_FULL = "## Workers\n"
WORKERS_COMPACT = "Workers:\n"
WORK_SO_FAR = "## The team's work so far"  # heads what the conductor sees when it is called as a worker
YOUR_INSTRUCTION = "# Your instruction\n"
TASK_HEADING = "# Task\n"
TEAM_WORK = "# Work from your team that you may use"
CHANGE_HEADING = "### What this step changed in its workspace (a diff against the files it started from)"
# The workflow step of a tool turn; its worker's messages are its own conversation, continued with the results.
TOOL_TURN_INSTRUCTION = "The client ran the tools you called; their results follow. Answer the task or call more tools."
_WORKER_LINE = re.compile(r"^- ([A-Za-z0-9][A-Za-z0-9_.\-]*): (.+)$", re.MULTILINE)
_STEP_LIMIT = re.compile(r"\b[Aa]t most (\d+) steps")


# ------------------------------------------------------------------------------------------- conductor


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
        return _compact_system_prompt(workers, ids[0], max_steps)
    return _full_system_prompt(workers, ids, max_steps)


def _compact_system_prompt(workers: str, first: str, max_steps: int) -> str:
    return (
        "You are the Conductor: write a workflow that a team of AI workers carries out.\n"
        f"{WORKERS_COMPACT}{workers}\n"
        'Reply with one JSON object: {"reasoning": "...", "steps": [{"worker": "<worker id>", "instruction": '
        '"<what that worker must do>", "access": <[] for only the task, earlier step numbers such as [0], or '
        f'"all">}}]}}. At most {max_steps} steps; the last step\'s answer is the final answer.\n'
        f"Example:\n{json.dumps(_one_step_example(first))}\n"
    )


def _full_system_prompt(workers: str, ids: list[str], max_steps: int) -> str:
    first, second = ids[0], ids[min(1, len(ids) - 1)]
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
        f"{WORKERS_FULL}{workers}\n\n"
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
        f"Task: What is the boiling point of water at sea level in Celsius?\n{json.dumps(_one_step_example(first))}\n\n"
        f"Task: Prove that the square root of 2 is irrational.\n{json.dumps(hard)}\n"
    )


def _one_step_example(worker: str) -> dict[str, Any]:
    return {
        "reasoning": "A short factual question: one capable worker is enough.",
        "steps": [{"worker": worker, "instruction": "Answer the question and state the final answer.", "access": []}],
    }


def with_files(context: str | None, files: list[tuple[str, str]]) -> str | None:
    """The caller's context followed by the files it named, each marked with its path."""
    parts = [context] if context else []
    parts += [f"## File: {path}\n```\n{text}\n```" for path, text in files]
    return "\n\n".join(parts) or None


def task_prompt(task: str, context: str | None) -> str:
    text = f"Task:\n{task}"
    if context:
        text += f"\n\nContext provided with the task (every worker sees it too):\n{context}"
    return text


def conductor_messages(pool: Pool, max_steps: int, task: str, context: str | None) -> list[dict[str, Any]]:
    """The conductor's prompt for planning a task."""
    return [
        {"role": "system", "content": system_prompt(pool, max_steps)},
        {"role": "user", "content": task_prompt(task, context)},
    ]


def correction_messages(
    pool: Pool, max_steps: int, task: str, context: str | None, seen: list[tuple[str, str]], instruction: str
) -> list[dict[str, Any]]:
    """The conductor's prompt when it is a worker: the (instruction, answer) pairs it sees, then its instruction."""
    work = "\n\n".join(
        f"### Step {i}: {step_instruction}\n{answer}" for i, (step_instruction, answer) in enumerate(seen)
    )
    return [
        {"role": "system", "content": system_prompt(pool, max_steps)},
        {
            "role": "user",
            "content": f"{task_prompt(task, context)}\n\n{WORK_SO_FAR}\n{work or '(no steps yet)'}\n\n"
            f"## Your instruction as a worker\n{instruction}\n\n{CORRECTION_REQUEST}",
        },
    ]


def retry_message(fault: str) -> dict[str, Any]:
    """What the conductor is told after writing an unusable workflow."""
    return {
        "role": "user",
        "content": f"That workflow could not be used: {fault}. Write the workflow again as one JSON object in the "
        "format described, using only the listed worker ids.",
    }


def continuation_step(workflow: Workflow, feedback: str) -> Step:
    """The conductor step a follow-up run adds after its parent's steps: it sees them all and the feedback."""
    return Step(
        worker=CONDUCTOR_ID,
        instruction=f"The caller gave this feedback on the final answer: {feedback}\n"
        "Write a workflow that addresses the feedback, or stop if the answer already does.",
        access=list(range(len(workflow.steps))),
    )


def recovery_instruction(failure: str) -> str:
    return (
        f"{failure}. Write a workflow that completes the task without that step's result, using the work that finished."
    )


def follow_up_context(previous: str | None, feedback: str) -> str:
    note = f"Feedback from the caller on an earlier answer: {feedback}"
    return f"{previous}\n\n{note}" if previous else note


# --------------------------------------------------------------------------------------------- workers


def worker_messages(
    task: str, context: str | None, workflow: Workflow, index: int, outputs: dict[int, str]
) -> list[dict[str, Any]]:
    """The one user message a worker receives for step `index`."""
    step = workflow.steps[index]
    parts = [f"{TASK_HEADING}{task}"]
    if context:
        parts.append(f"# Context\n{context}")
    if step.access:
        seen = [
            f"## Step {j}: instruction\n{workflow.steps[j].instruction}\n\n## Step {j}: answer\n{cut_seen(outputs[j])}"
            for j in step.access
        ]
        parts.append(f"{TEAM_WORK}\n\n" + "\n\n".join(seen))
    parts.append(f"{YOUR_INSTRUCTION}{step.instruction}")
    return [{"role": "user", "content": "\n\n".join(parts)}]


def seen_output(output: str, work: StepWork | None) -> str:
    """A step's answer as later steps see it: an agent's change to its workspace (its diff) follows its answer."""
    if work is None or work.diff is None or not work.diff.text:
        return output
    return f"{output}\n\n{CHANGE_HEADING}\n{work.diff.text}"


def cut_seen(output: str) -> str:
    """A seen output, cut to MAX_SEEN_OUTPUT_CHARS so one huge answer cannot flood every later prompt."""
    if len(output) <= MAX_SEEN_OUTPUT_CHARS:
        return output
    return output[:MAX_SEEN_OUTPUT_CHARS] + f"\n[... {len(output) - MAX_SEEN_OUTPUT_CHARS} more characters cut]"


# ------------------------------------------------------------------------------------------------ readers


def read_workers(system: str) -> list[tuple[str, str]]:
    """The (id, description) lines of the worker list in a conductor system prompt (full or compact)."""
    for heading, end in ((WORKERS_FULL, "\n## "), (WORKERS_COMPACT, "\nReply with")):
        if heading in system:
            return _WORKER_LINE.findall(system.split(heading, 1)[1].split(end, 1)[0])
    return []


def read_step_limit(system: str) -> int | None:
    """The step limit a conductor system prompt states."""
    match = _STEP_LIMIT.search(system)
    return int(match.group(1)) if match else None


def read_correction_work(user: str) -> str | None:
    """The team's work shown to the conductor called as a worker, or None when it is planning a task."""
    return user.split(WORK_SO_FAR, 1)[1] if WORK_SO_FAR in user else None


def read_worker_prompt(prompt: str) -> tuple[str, str]:
    """A worker prompt split into what it was shown (task, context, seen steps) and its instruction."""
    if YOUR_INSTRUCTION not in prompt:
        return prompt, prompt.strip()
    shown, _, instruction = prompt.rpartition(YOUR_INSTRUCTION)
    return shown, instruction.strip()


def read_task(prompt: str) -> str:
    """The task section of a worker prompt (the whole prompt when it has no such section)."""
    if not prompt.startswith(TASK_HEADING):
        return prompt
    task = prompt.removeprefix(TASK_HEADING)
    ends = [task.find(marker) for marker in ("\n\n# Context\n", f"\n\n{TEAM_WORK}", f"\n\n{YOUR_INSTRUCTION}")]
    return task[: min((end for end in ends if end >= 0), default=len(task))]
