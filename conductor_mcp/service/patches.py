"""The patch a run's agents made, as the doors hand it back: a summary (files changed, lines added and removed) and
resource links to it, and `apply`, which writes it into the caller's tree only when that tree is still the one the
patch was made from. Nothing else of the server ever writes the caller's tree.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from conductor_mcp.agents.apply import PatchRefused, apply_patch
from conductor_mcp.core.agent_records import FileChange
from conductor_mcp.core.final_work import final_work
from conductor_mcp.core.limits import MAX_FILES_LISTED, METADATA_VALUE_CHARS
from conductor_mcp.core.records import Run
from conductor_mcp.errors import RequestError, StepNotFound
from conductor_mcp.service.catalogue import PoolCatalog
from conductor_mcp.service.files import workspace_in_roots

WorkspaceArg = Annotated[
    str | None,
    Field(
        max_length=4096,
        description="The repository (or directory) agent workers work on, each in its own copy: a path inside "
        "your roots. Default: the first root. Your tree is never changed unless you pass apply: true.",
    ),
]
ApplyArg = Annotated[
    bool,
    Field(
        description="When the run is done, apply its final patch to your tree with `git apply --3way`, only if the "
        "tree still matches what the agents started from (else an error, and the patch stays available)."
    ),
]


class PatchSummary(BaseModel):
    """The final patch of a run: the change of the last agent step the answer rests on, from the caller's tree."""

    step: str = Field(description="the key of the step whose result it is")
    workspace: str = Field(description="the caller's tree the patch applies to")
    base_commit: str | None = Field(default=None, description="HEAD of that tree when the agents started")
    files_changed: int
    lines_added: int
    lines_removed: int
    files: list[FileChange] = Field(description=f"the files it changes (the first {MAX_FILES_LISTED})")
    uri: str = Field(description="the whole patch (git apply input), a resource")
    diff_uri: str = Field(description="that step's own diff against the files it started from, a resource")
    available: bool = Field(description="whether the whole patch is kept (a huge or non-UTF-8 one is not)")
    note: str | None = None
    applied: Literal["applied", "refused", "not asked"] = "not asked"
    apply_error: str | None = Field(default=None, description="why it was not applied, when apply was asked for")


def wants_workspace(pools: PoolCatalog, workspace: str | None, pool: str | None) -> bool:
    """Whether a request needs its workspace checked: it names one, or its pool has workers that work in one."""
    return workspace is not None or any(w.needs_workspace() for w in pools.for_request(pool).workers)


def patch_metadata(run: Run) -> dict[str, str]:
    """The final patch for the OpenAI door's response metadata (string values of at most 512 characters): JSON
    with the step, the counts and as many of the changed paths as fit."""
    summary = patch_summary(run)
    if summary is None:
        return {}
    paths = [change.path for change in summary.files]
    while True:
        text = json.dumps(
            {
                "step": summary.step,
                "files_changed": summary.files_changed,
                "lines_added": summary.lines_added,
                "lines_removed": summary.lines_removed,
                "files": paths,
            }
        )
        if len(text) <= METADATA_VALUE_CHARS or not paths:
            return {"conductor_patch": text[:METADATA_VALUE_CHARS]}
        paths = paths[:-1]


def patch_uri(run_id: str, key: str, kind: Literal["patch", "diff"]) -> str:
    return f"conductor://runs/{run_id}/steps/{key}/{kind}"


def patch_summary(run: Run) -> PatchSummary | None:
    """The run's final patch, summarised; None when no step the answer rests on changed its workspace."""
    found = final_work(run)
    if found is None:
        return None
    record, work = found
    return PatchSummary(
        step=record.key,
        workspace=work.root.source,
        base_commit=work.root.commit,
        files_changed=len(work.patch_files),
        lines_added=sum(f.added or 0 for f in work.patch_files),
        lines_removed=sum(f.removed or 0 for f in work.patch_files),
        files=work.patch_files[:MAX_FILES_LISTED],
        uri=patch_uri(run.id, record.key, "patch"),
        diff_uri=patch_uri(run.id, record.key, "diff"),
        available=work.patch is not None,
        note=work.patch_note,
    )


async def apply_final_patch(run: Run, summary: PatchSummary | None, roots: list[Path]) -> PatchSummary | None:
    """`apply: true`: the summary with the outcome; the caller's tree is written only when it still matches."""
    if summary is None:
        return None
    found = final_work(run)
    if run.status == "running":
        return _refused(summary, "the run is still running: call continue_workflow with apply: true once it is done")
    patch = found[1].patch if found is not None else None
    if found is None or patch is None:
        return _refused(summary, summary.note or "the patch is not kept, so it cannot be applied")
    work = found[1]
    try:
        # A tree this caller may still name: the part of it the workspace held (its root, when inside a repository).
        workspace_in_roots(str(Path(work.root.source, work.root.scope)), roots)
        await asyncio.to_thread(apply_patch, patch.encode("utf-8"), work.root)
    except (PatchRefused, RequestError) as exc:
        return _refused(summary, str(exc))
    return summary.model_copy(update={"applied": "applied"})


def _refused(summary: PatchSummary, why: str) -> PatchSummary:
    return summary.model_copy(update={"applied": "refused", "apply_error": why})


def step_change(run: Run, key: str, kind: Literal["patch", "diff"]) -> str:
    """A step's diff (its own change, bounded) or its whole patch (from the caller's tree), as text."""
    record = next((step for step in run.steps if step.key == key), None)
    if record is None:
        raise StepNotFound(run.id, key)
    work = record.work
    if work is None:
        raise RequestError(f"step {key} of run {run.id} did not work in a workspace: it has no {kind}")
    if kind == "diff":
        return work.diff.text if work.diff is not None else ""
    if work.patch is None and work.patch_files:
        raise RequestError(f"step {key} of run {run.id}: {work.patch_note or 'its patch is not kept'}")
    return work.patch or ""
