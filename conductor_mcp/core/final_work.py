"""Which workspace change a run's answer rests on: the patch a caller gets back (and may apply).

The answer is the last step's output. The steps it rests on are that step and, through the access lists, every
step it saw, transitively (a corrective workflow's last step stands in for the conductor step that wrote it). Of
those, the latest that changed its workspace holds the final patch: its `patch` runs from the caller's tree to its
result, the work of the agents it built on included.
"""

from __future__ import annotations

from conductor_mcp.core.agent_records import StepWork
from conductor_mcp.core.records import Run, StepRecord


def resting_on(run: Run) -> list[StepRecord]:
    """The finished steps the run's answer rests on, in workflow order."""
    if run.workflow is None or not run.workflow.steps:
        return []
    by_key = {record.key: record for record in run.steps}
    seen: set[str] = set()
    todo = [str(len(run.workflow.steps) - 1)]
    while todo:
        record = by_key.get(todo.pop())
        if record is None or record.key in seen or record.status != "done":
            continue
        seen.add(record.key)
        prefix = f"{record.parent}." if record.parent else ""
        todo += [f"{prefix}{j}" for j in record.access]
        if record.workflow is not None and record.workflow.steps and record.finish_reason == "corrected":
            todo.append(f"{record.key}.{len(record.workflow.steps) - 1}")
    return sorted((by_key[key] for key in seen), key=lambda record: record.order)


def final_work(run: Run) -> tuple[StepRecord, StepWork] | None:
    """The latest step the answer rests on whose workspace changed, with its work; None when there is none."""
    for record in reversed(resting_on(run)):
        if record.work is not None and record.work.patch_files:
            return record, record.work
    return None
