"""Workflows: what the Conductor writes, how it is parsed, and how it is checked against a pool.

A workflow is a short list of steps. Each step names a worker, gives it an instruction, and says which
earlier steps' (instruction, answer) pairs it may see. The Conductor's output is constrained by
`workflow_json_schema`; the parser also accepts the paper's form (three equal-length lists `model_id`,
`subtasks`, `access_list` after free text) because trained conductors and prompted frontier models write it.
Whatever a model writes, parsing ends in a valid `Workflow` plus a list of recorded repairs, or in a
`WorkflowError` that names the fault: never in any other exception.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from conductor_mcp.errors import RequestError, WorkflowError

ALL = "all"
DEFAULT_INSTRUCTION = "Answer the task directly and completely."


class Repair(BaseModel):
    """One fault in the conductor's output that was fixed rather than rejected."""

    step: int | None = Field(default=None, description="0-based step index the repair applies to, if any")
    fault: str
    action: str


class Step(BaseModel):
    """One worker call. `access` lists the earlier steps (0-based) whose instruction and answer it sees."""

    worker: str
    instruction: str
    access: list[int] = Field(default_factory=list)


class Workflow(BaseModel):
    """A validated workflow: every worker is known, every access index points backwards."""

    reasoning: str = ""
    steps: list[Step] = Field(default_factory=list)


def given_workflow(workflow: Workflow, workers: list[str]) -> Workflow:
    """A workflow a caller supplied (baselines, replays), checked: each step names one of `workers` and sees
    only earlier steps. Bad ones raise RequestError."""
    if not workflow.steps:
        raise RequestError("workflow: must have at least one step")
    for i, step in enumerate(workflow.steps):
        if step.worker not in workers:
            raise RequestError(f"workflow: step {i} names unknown worker {step.worker!r}")
        if any(not 0 <= j < i for j in step.access):
            raise RequestError(f"workflow: step {i} may only see earlier steps, got {step.access}")
    return workflow


class ParsedWorkflow(BaseModel):
    """A workflow as the conductor wrote it, before it is checked against a pool."""

    reasoning: str = ""
    steps: list[dict[str, Any]] = Field(default_factory=list)
    form: Literal["json", "lists"] = "json"
    repairs: list[Repair] = Field(default_factory=list)


def workflow_json_schema(
    worker_ids: list[str], max_steps: int, max_text_chars: int | None = None, allow_empty: bool = False
) -> dict[str, Any]:
    """The JSON schema the conductor's decoding is constrained to: short reasoning first, then the steps.

    `max_text_chars` bounds the free-text fields, for backends (llama.cpp, vLLM) whose grammars enforce it;
    an empty steps list ("stop") is only allowed where it means something: the conductor called as a worker.
    """
    text: dict[str, Any] = {"type": "string"}
    if max_text_chars:
        text["maxLength"] = max_text_chars
    return {
        "type": "object",
        "properties": {
            "reasoning": text,
            "steps": {
                "type": "array",
                "minItems": 0 if allow_empty else 1,
                "maxItems": max_steps,
                "items": {
                    "type": "object",
                    "properties": {
                        "worker": {"type": "string", "enum": list(worker_ids)},
                        "instruction": text,
                        "access": {
                            "anyOf": [
                                {"type": "string", "enum": [ALL]},
                                {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            ]
                        },
                    },
                    "required": ["worker", "instruction", "access"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["reasoning", "steps"],
        "additionalProperties": False,
    }


# ---------------------------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"```(?:json|python|py)?\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_LIST_KEYS = ("model_id", "subtasks", "access_list")


def parse_workflow(text: str) -> ParsedWorkflow:
    """Parse a conductor's output (the JSON shape or the paper's three lists) without consulting a pool."""
    try:
        return _parse(text)
    except RecursionError:  # the JSON and literal decoders recurse per nesting level
        raise WorkflowError("conductor output is nested too deeply to be a workflow") from None


def _parse(text: str) -> ParsedWorkflow:
    if not isinstance(text, str):
        raise WorkflowError(f"conductor output must be text, got {type(text).__name__}")
    if not text.strip():
        raise WorkflowError("conductor output is empty")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        obj = _first_json_object(candidate)
        if obj is not None:
            if "steps" in obj:
                return _from_json_object(obj)
            if all(key in obj for key in _LIST_KEYS):
                return _from_lists(obj, str(obj.get("reasoning", "")), form="json")
    lists = _paper_lists(text)
    if lists is not None:
        reasoning = text[: lists.pop("_start")].strip()
        return _from_lists(lists, reasoning, form="lists")
    raise WorkflowError(
        "no workflow found: expected a JSON object with 'steps' or the lists model_id, subtasks and access_list"
    )


def _first_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` that looks like a workflow (free text around it is allowed)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and ("steps" in obj or "model_id" in obj):
            return obj
    return None


def _from_json_object(obj: dict[str, Any]) -> ParsedWorkflow:
    steps = obj["steps"]
    if not isinstance(steps, list):
        raise WorkflowError(f"'steps' must be a list, got {type(steps).__name__}")
    repairs: list[Repair] = []
    parsed: list[dict[str, Any]] = []
    for i, raw in enumerate(steps):
        if not isinstance(raw, dict):
            raise WorkflowError(f"step {i} must be an object, got {type(raw).__name__}")
        worker = raw.get("worker", raw.get("model", raw.get("model_id")))
        instruction = raw.get("instruction", raw.get("subtask", raw.get("task")))
        if "access" in raw:
            access = raw["access"]
        elif "access_list" in raw:
            access = raw["access_list"]
        else:
            access = None
        parsed.append({"worker": worker, "instruction": instruction, "access": access})
    reasoning = obj.get("reasoning", "")
    if not isinstance(reasoning, str):
        reasoning = json.dumps(reasoning)
        repairs.append(Repair(fault="reasoning is not a string", action="kept its JSON text"))
    return ParsedWorkflow(reasoning=reasoning, steps=parsed, form="json", repairs=repairs)


def _from_lists(lists: dict[str, Any], reasoning: str, form: Literal["json", "lists"]) -> ParsedWorkflow:
    workers, subtasks, access = (lists[key] for key in _LIST_KEYS)
    for key, value in zip(_LIST_KEYS, (workers, subtasks, access), strict=True):
        if not isinstance(value, list | tuple):
            raise WorkflowError(f"'{key}' must be a list, got {type(value).__name__}")
    repairs: list[Repair] = []
    n = min(len(workers), len(subtasks), len(access))
    if not len(workers) == len(subtasks) == len(access):
        repairs.append(
            Repair(
                fault=f"lists differ in length (model_id {len(workers)}, subtasks {len(subtasks)}, "
                f"access_list {len(access)})",
                action=f"kept the first {n} entries of each",
            )
        )
    steps = [{"worker": workers[i], "instruction": subtasks[i], "access": access[i]} for i in range(n)]
    return ParsedWorkflow(reasoning=reasoning, steps=steps, form=form, repairs=repairs)


def _paper_lists(text: str) -> dict[str, Any] | None:
    """Find `model_id = [...]`, `subtasks = [...]`, `access_list = [...]` (Python or JSON literals)."""
    found: dict[str, Any] = {}
    start = len(text)
    for key in _LIST_KEYS:
        # the last assignment wins: models often restate the lists at the end
        match = next(reversed(list(re.finditer(rf"[\"']?\b{key}\b[\"']?\s*[:=]\s*\[", text))), None)
        if match is None:
            return None
        literal = _bracketed(text, match.end() - 1)
        if literal is None:
            raise WorkflowError(f"'{key}' list is not closed")
        found[key] = _literal(literal, key)
        start = min(start, match.start())
    found["_start"] = start
    return found


def _bracketed(text: str, open_at: int) -> str | None:
    """The balanced [...] literal starting at `open_at`, skipping brackets inside quoted strings."""
    depth = 0
    quote: str | None = None
    escaped = False
    for i in range(open_at, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return text[open_at : i + 1]
    return None


def _literal(literal: str, key: str) -> Any:
    try:
        return json.loads(literal)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(literal)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise WorkflowError(f"'{key}' is not a valid list literal: {exc}") from None


# ------------------------------------------------------------------------------------------- validation


def validate_workflow(
    parsed: ParsedWorkflow,
    worker_ids: list[str],
    max_steps: int,
    allow_empty: bool = False,
) -> tuple[Workflow, list[Repair]]:
    """Check a parsed workflow against the ids the conductor was shown; repair what can be repaired.

    Repairable: near-miss worker ids, access given as "all"/int/missing, forward or out-of-range indices
    (dropped), too many steps (the first max_steps-1 and the last are kept), empty instructions.
    Unrepairable (WorkflowError): unknown workers, non-text instructions, no steps when steps are required.
    """
    repairs = list(parsed.repairs)
    raw_steps = list(parsed.steps)
    if not raw_steps:
        if allow_empty:
            return Workflow(reasoning=parsed.reasoning, steps=[]), repairs
        raise WorkflowError("workflow has no steps")
    if max_steps < 1:
        raise WorkflowError(f"max_steps must be at least 1, got {max_steps}")
    kept_indices = list(range(len(raw_steps)))
    if len(raw_steps) > max_steps:
        kept_indices = [*range(max_steps - 1), len(raw_steps) - 1]
        repairs.append(
            Repair(
                fault=f"{len(raw_steps)} steps exceed the limit of {max_steps}",
                action=f"kept steps {kept_indices[:-1]} and the last step {kept_indices[-1]}",
            )
        )
    new_index = {old: new for new, old in enumerate(kept_indices)}
    steps: list[Step] = []
    for new, old in enumerate(kept_indices):
        raw = raw_steps[old]
        worker = _resolve_worker(raw.get("worker"), worker_ids, new, repairs)
        instruction = _instruction(raw.get("instruction"), new, repairs)
        access = _access(raw.get("access"), old, new_index, new, repairs)
        steps.append(Step(worker=worker, instruction=instruction, access=access))
    return Workflow(reasoning=parsed.reasoning, steps=steps), repairs


def _norm(name: str) -> str:
    return re.sub(r"[\s\-_.]+", "_", name.strip().strip("`'\"").lower())


def _resolve_worker(raw: Any, worker_ids: list[str], step: int, repairs: list[Repair]) -> str:
    if isinstance(raw, str) and raw in worker_ids:
        return raw
    if isinstance(raw, bool) or raw is None or not isinstance(raw, str | int | float):
        raise WorkflowError(f"step {step}: worker must be a worker id, got {raw!r}")
    text = str(int(raw)) if isinstance(raw, int | float) and float(raw).is_integer() else str(raw)
    by_norm = {_norm(w): w for w in worker_ids}
    resolved = by_norm.get(_norm(text))
    if resolved is None and re.fullmatch(r"\s*(model\s*[_\-]?\s*)?\d+\s*", text, re.IGNORECASE):
        number = int(re.sub(r"\D", "", text))
        resolved = by_norm.get(f"model_{number}")
        if resolved is None and 0 <= number < len(worker_ids):
            resolved = worker_ids[number]
    if resolved is None:
        known = ", ".join(worker_ids)
        raise WorkflowError(f"step {step}: unknown worker {text!r}; known workers: {known}")
    repairs.append(Repair(step=step, fault=f"worker {raw!r} is not an exact id", action=f"read as {resolved!r}"))
    return resolved


def _instruction(raw: Any, step: int, repairs: list[Repair]) -> str:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        repairs.append(Repair(step=step, fault="empty instruction", action=f"used {DEFAULT_INSTRUCTION!r}"))
        return DEFAULT_INSTRUCTION
    if not isinstance(raw, str):
        raise WorkflowError(f"step {step}: instruction must be text, got {type(raw).__name__}")
    return raw.strip()


def _access(raw: Any, old: int, new_index: dict[int, int], step: int, repairs: list[Repair]) -> list[int]:
    """Resolve an access entry to sorted earlier indices (in the kept numbering)."""
    if raw is None:
        repairs.append(Repair(step=step, fault="access missing", action="step sees all earlier steps"))
        raw = ALL
    if isinstance(raw, str):
        if raw.strip().lower() == ALL:
            return list(range(step))
        try:
            raw = [int(raw.strip())]
        except ValueError:
            repairs.append(Repair(step=step, fault=f"access {raw!r} is not understood", action="sees none"))
            return []
        repairs.append(Repair(step=step, fault="access is a single index", action=f"read as {raw}"))
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        repairs.append(Repair(step=step, fault="access is a single index", action=f"read as [{raw!r}]"))
        raw = [raw]
    if not isinstance(raw, list | tuple):
        repairs.append(Repair(step=step, fault=f"access {raw!r} is not a list", action="sees none"))
        return []
    resolved: set[int] = set()
    seen: set[int] = set()
    for item in raw:
        index = _as_index(item)
        if index is not None and index in seen:
            repairs.append(Repair(step=step, fault=f"access index {index} repeated", action="deduplicated"))
            continue
        if index is not None:
            seen.add(index)
        if index is None or index >= old or index < 0:
            repairs.append(
                Repair(
                    step=step,
                    fault=f"access index {item!r} does not point to an earlier step",
                    action="dropped",
                )
            )
        elif index not in new_index:
            repairs.append(Repair(step=step, fault=f"access index {index} points to a dropped step", action="dropped"))
        else:
            resolved.add(new_index[index])
    return sorted(resolved)


def _as_index(item: Any) -> int | None:
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item
    if isinstance(item, float) and item.is_integer():
        return int(item)
    if isinstance(item, str):
        match = re.fullmatch(r"\s*(?:step\s*)?(\d+)\s*", item, re.IGNORECASE)
        return int(match.group(1)) if match else None
    return None
