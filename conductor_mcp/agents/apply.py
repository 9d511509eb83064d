"""Apply a run's patch to the caller's tree, and only to the tree it was made from.

The patch was made against a snapshot of the caller's files (HEAD and the uncommitted changes, or a plain
directory's files). Before anything is written the tree is snapshotted again the same way, into a private store:
if HEAD moved or a file changed since, nothing is applied and the error says so (the patch stays in the run).
A repository gets `git apply --3way` (its index is updated for the files the patch touches); a plain directory
gets `git apply`. Blocking (git): run it in a thread.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from conductor_mcp.agents import git
from conductor_mcp.core.agent_records import WorkspaceBase
from conductor_mcp.errors import WorkspaceError


class PatchRefused(WorkspaceError):
    """The caller's tree is no longer what the patch was made from, or git would not apply it."""


def tree_now(source: Path, base: WorkspaceBase) -> str:
    """The git tree id of `source` as it is now, taken the way the workspace took it at its start."""
    repo = git.repository_of(source)
    if base.kind == "worktree":
        if repo is None or repo.head is None:
            raise PatchRefused(f"{source} is no longer a git repository with a commit")
        if repo.head != base.commit:
            raise PatchRefused(f"{source}: HEAD is {repo.head[:12]}, the patch was made at {(base.commit or '')[:12]}")
    with tempfile.TemporaryDirectory(prefix="conductor-apply-") as scratch:
        borrowed = [repo.common_dir / "objects"] if repo is not None and base.kind == "worktree" else []
        exclude = repo.common_dir / "info" / "exclude" if repo is not None and base.kind == "worktree" else None
        store = git.Store.create(Path(scratch) / "meta", borrowed, exclude)
        return store.snapshot(source, index="apply-index")


def apply_patch(patch: bytes, base: WorkspaceBase) -> None:
    """Apply `patch` to the tree `base` names (its `source`), or PatchRefused saying why nothing was written."""
    source = Path(base.source)
    if not source.is_dir():
        raise PatchRefused(f"{source} is not a directory any more")
    if tree_now(source, base) != base.tree:
        raise PatchRefused(
            f"{source} changed since the run started (its files are not the ones the patch was made from): "
            "nothing was applied; the patch stays available in the run"
        )
    args = ["apply", "--3way", "-"] if base.kind == "worktree" else ["apply", "-"]
    try:
        git.git(args, cwd=source, stdin=patch)
    except WorkspaceError as exc:
        raise PatchRefused(f"git apply refused the patch: {exc}") from None
