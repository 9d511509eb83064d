"""Apply a run's patch to the caller's tree, and only to the tree it was made from.

The patch was made against a snapshot of the caller's files (HEAD and the uncommitted changes, or a plain
directory's files). Before anything is written the tree is snapshotted again the same way, into a private store:
if HEAD moved or a file changed since, nothing is applied and the error says so (the patch stays in the run).
Every path the patch touches must then lie in the tree (in the workspace's scope, when it had one) with no
symbolic link on the way to it: an ignored link (`build -> /elsewhere`) is in no snapshot and no index, and git
would write through it. A repository gets `git apply --3way` (its index is updated for the files the patch
touches); a plain directory gets `git apply`.
Blocking (git): run it in a thread.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path, PurePosixPath

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
        if repo is None or base.kind != "worktree":
            return git.Store.create(Path(scratch) / "meta", [], None).snapshot(source, index="apply-index")
        exclude = repo.common_dir / "info" / "exclude"
        store = git.Store.create(Path(scratch) / "meta", [repo.common_dir / "objects"], exclude)
        assert repo.head is not None
        return store.snapshot_over(repo.head, source, "apply-index", base.scope)


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
    for path in touched_paths(patch, source):
        if base.scope and not PurePosixPath(path).is_relative_to(base.scope):
            raise PatchRefused(f"the patch writes {path!r}, outside {base.scope}, the root its workspace held")
        _refuse_links(source, path)
    args = ["apply", "--3way", "-"] if base.kind == "worktree" else ["apply", "-"]
    try:
        git.git(args, cwd=source, stdin=patch)
    except WorkspaceError as exc:
        raise PatchRefused(f"git apply refused the patch: {exc}") from None


def touched_paths(patch: bytes, cwd: Path) -> list[str]:
    """Every path `patch` reads or writes, as git apply reads them (both sides of a rename)."""
    try:
        listing = git.git(["apply", "--numstat", "-z", "-"], cwd=cwd, stdin=patch)
    except WorkspaceError as exc:
        raise PatchRefused(f"git apply cannot read the patch: {exc}") from None
    paths: list[str] = []
    fields = iter(listing.split(b"\0"))
    for record in fields:
        if not record:
            continue
        name = record.split(b"\t", 2)[2]
        names = [name] if name else [next(fields, b""), next(fields, b"")]  # a rename: its two names follow
        paths += [os.fsdecode(n) for n in names if n]
    return paths


def _refuse_links(source: Path, path: str) -> None:
    """PatchRefused when writing `path` under `source` could leave it: an absolute path, `..`, or a symbolic link
    (ignored or not) in place of one of its folders."""
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts:
        raise PatchRefused(f"the patch names {path!r}, which is not a path inside {source}: nothing was applied")
    folder = source
    for part in parts[:-1]:
        folder = folder / part
        try:
            mode = os.lstat(folder).st_mode
        except OSError:
            break  # missing: git makes it, and what is under it, as plain folders (or fails, writing nothing)
        if stat.S_ISLNK(mode):
            raise PatchRefused(
                f"the patch writes {path!r}, but {folder.relative_to(source)} is a symbolic link in {source} "
                f"(to {os.readlink(folder)!r}): apply never writes through a link; nothing was applied"
            )
    if not Path(os.path.realpath(source.joinpath(*parts[:-1]))).is_relative_to(os.path.realpath(source)):
        raise PatchRefused(f"the patch writes {path!r}, which resolves outside {source}: nothing was applied")
