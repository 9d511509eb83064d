"""One agent step's workspace: its own copy of the caller's repository, never the caller's tree.

A repository becomes a `git worktree` at HEAD (detached, no hooks run) holding exactly the caller's files as they
are now: HEAD plus the staged, unstaged and untracked (not ignored) changes, so the agent sees what the user sees.
With a `bound` (the operator's root that holds the source) that lies inside the repository, the worktree holds only
that part of it (a sparse worktree: the rest is neither written nor read, untracked files above it included), and
its snapshots read only that part. A directory outside git becomes a copy of itself only. Either way the start is
snapshotted as a git tree (the base), and the workspace's diff is that base against a snapshot taken when it is
read: new files included, binary files named.
A workspace can also start from another one's result (`derive`), and then its diff shows only its own work.

These functions block (git, file copies): the owner (agents/owner.py) runs them in threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conductor_mcp.agents import git
from conductor_mcp.agents.diffs import bounded_diff, changed_files
from conductor_mcp.core.agent_records import FileChange, WorkspaceBase, WorkspaceDiff
from conductor_mcp.core.limits import DIFF_MAX_BYTES, PATCH_MAX_BYTES
from conductor_mcp.errors import WorkspaceError
from conductor_mcp.runtime.sandbox import SANDBOX_UID

WORKTREE_ENTRY = "meta/worktree-entry"
_WATCHED_GIT_DIRS = (
    "",
    "info",
    "objects/info",
    "hooks",
)  # the worktree's directory in the caller's .git, as git made it


@dataclass
class Workspace:
    """A workspace on disk: `work` is the agent's tree, `cwd` where it starts, `home` its private HOME."""

    base: WorkspaceBase
    dir: Path  # everything of this workspace lives under it
    work: Path
    store: git.Store
    repo: git.RepoInfo | None = None  # the caller's repository, for a worktree (its entry goes with it)
    worktree_entry: Path | None = None  # the worktree's directory inside the caller's .git/worktrees
    keep: bool = False
    handed_to_sandbox: bool = False
    hidden: tuple[Path, ...] = ()  # what no agent working here may read (the server's state): set by its owner

    @property
    def id(self) -> str:
        return self.base.id

    @property
    def cwd(self) -> Path:
        return self.work / self.base.subdir if self.base.subdir else self.work

    @property
    def home(self) -> Path:
        return self.dir / "home"

    def snapshot(self) -> str:
        """The tree id of the workspace as it is now (its scope read, the rest as it started)."""
        return self.store.snapshot(self.work, within=self.base.scope)

    def diff(self, max_bytes: int = DIFF_MAX_BYTES) -> WorkspaceDiff:
        """What changed since the base, as a unified diff cut to `max_bytes` (binary files named, not shown)."""
        return bounded_diff(self.store, self.base.tree, self.snapshot(), max_bytes)

    def patch(self, max_bytes: int = PATCH_MAX_BYTES) -> bytes:
        """The whole change since the base as a patch `git apply` takes, binary files included; WorkspaceError when
        it is over `max_bytes` (reading stops there)."""
        data = _patch(self.store, self.base.tree, self.snapshot(), max_bytes)
        if data is None:
            raise WorkspaceError(f"workspace {self.id}: its patch is over {max_bytes} bytes")
        return data

    def patch_from(self, origin: Workspace, max_bytes: int = PATCH_MAX_BYTES) -> tuple[bytes | None, list[FileChange]]:
        """The whole change from `origin`'s base (the first workspace of the chain this one was derived from) to
        this workspace's result, as `git apply` input, and the files it changes. Both stores are read together.
        A patch over `max_bytes` is too large to keep: None in its place (reading stops there), the files still
        listed, so the change is summarised whatever its size."""
        new = self.snapshot()
        store = self.store
        if origin is not self:
            store = git.Store(self.store.git_dir, [*self.store.borrowed, origin.store.git_dir / "objects"])
        return _patch(store, origin.base.tree, new, max_bytes), changed_files(store, origin.base.tree, new)

    def take_over(self, patch: bytes, parent_id: str) -> Workspace:
        """Start from an earlier workspace's result that is gone (a run resumed in another process): apply its
        patch, made against the tree this workspace holds, and make the result this workspace's base. Returns the
        workspace as it was (its origin, for `patch_from`); WorkspaceError, with nothing changed, if it does not fit."""
        origin = dataclasses.replace(self)
        self.store.run(["apply", "--whitespace=nowarn", "-"], self.work, stdin=patch)
        self.base = self.base.model_copy(update={"tree": self.snapshot(), "parent": parent_id})
        return origin

    def git_dir_entries(self) -> set[str]:
        """What the caller's .git holds where agents' sandboxes leave mount points (see `tidy_git_dir`)."""
        if self.repo is None:
            return set()
        common = self.repo.common_dir
        return {
            str(entry.relative_to(common))
            for folder in _WATCHED_GIT_DIRS
            if (common / folder).is_dir()
            for entry in (common / folder).iterdir()
        }

    def tidy_git_dir(self, before: set[str]) -> list[str]:
        """Remove what appeared in the caller's .git since `before` and is empty: Claude Code's sandbox makes empty
        files and directories there as mount points (so that nothing it runs can write git's config, hooks or
        object store) and leaves them behind. Anything with content is left alone. Returns what it removed."""
        if self.repo is None:
            return []
        removed = []
        for name in sorted(self.git_dir_entries() - before):
            path = self.repo.common_dir / name
            if _holds_nothing(path):
                remove_tree(path) if path.is_dir() else path.unlink(missing_ok=True)
                removed.append(name)
        return removed

    def hand_to_sandbox(self) -> None:
        """Let the `run` tool's sandbox write the tree. Its processes are uid 65534 on the host when the server runs
        as root, so for a root server the tree becomes theirs (once; links are not followed). The server still reads
        it as root, and git reads it through the workspace's own store, never the tree's `.git`."""
        if os.geteuid() != 0 or self.handed_to_sandbox:
            return
        for folder, dirs, files in os.walk(self.work):
            for name in [folder, *(os.path.join(folder, entry) for entry in (*dirs, *files))]:
                os.chown(name, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)
        self.handed_to_sandbox = True

    def size_bytes(self) -> int:
        return tree_size(self.work)

    def remove(self) -> None:
        """Delete the workspace, and its worktree entry in the caller's repository."""
        if self.repo is not None:
            # When the caller's repository moved, or the tree is half-made, its files still go below.
            with contextlib.suppress(WorkspaceError):
                git.git(["worktree", "remove", "--force", "--force", str(self.work)], cwd=self.repo.top)
        remove_tree(self.dir)
        if self.worktree_entry is not None:
            remove_tree(self.worktree_entry)  # only left when `worktree remove` could not do it


# ----------------------------------------------------------------------------------------------- making one


def create(directory: Path, source: Path, ws_id: str, budget_bytes: int, bound: Path | None = None) -> Workspace:
    """A workspace in `directory` (which must not exist) holding `source` as the caller has it now: a worktree of
    the repository that holds it, or a copy when it is in none (or its repository has no commit yet). Nothing
    outside `bound` (a folder holding `source`; by default `source` itself) is in it."""
    source = source.resolve()
    bound = source if bound is None else bound.resolve()
    if not source.is_dir():
        raise WorkspaceError(f"workspace source {source} is not a directory")
    if not source.is_relative_to(bound):
        raise WorkspaceError(f"workspace source {source} is outside {bound}, the root it must stay in")
    directory.mkdir(parents=True)
    try:
        repo = git.repository_of(source)
        if repo is None or repo.head is None:
            return _copy(directory, source, ws_id, budget_bytes, parent=None)
        scope = bound.relative_to(repo.top).as_posix() if bound != repo.top and bound.is_relative_to(repo.top) else ""
        exclude = repo.common_dir / "info" / "exclude"
        store = git.Store.create(directory / "meta", [repo.common_dir / "objects"], exclude)
        tree = store.snapshot_over(repo.head, repo.top, "caller-index", scope)  # the caller's files as they are
        subdir = source.relative_to(repo.top).as_posix() if source != repo.top else ""
        return _worktree(directory, repo, store, tree, ws_id, budget_bytes, subdir, scope)
    except BaseException:
        remove_tree(directory)
        raise


def derive(directory: Path, parent: Workspace, ws_id: str, budget_bytes: int) -> Workspace:
    """A workspace that starts from `parent`'s result as it is now; its base is that result."""
    directory.mkdir(parents=True)
    try:
        if parent.repo is None:
            return _copy(directory, parent.work, ws_id, budget_bytes, parent=parent.base)
        own = parent.repo.common_dir / "objects"
        exclude = parent.store.git_dir / "info" / "exclude"
        store = git.Store.create(directory / "meta", [own, parent.store.git_dir / "objects"], exclude)
        base = parent.base
        workspace = _worktree(
            directory, parent.repo, store, parent.snapshot(), ws_id, budget_bytes, base.subdir, base.scope, base
        )
        # Its own copy of the base, so that it outlives the parent: with the stat data gone, the snapshot hashes
        # every file of its scope again, and writes here what only the parent's store held.
        store.read_tree(workspace.base.tree, workspace.work)
        store.borrowed = [own]
        if workspace.snapshot() != workspace.base.tree:
            raise WorkspaceError(f"workspace {ws_id}: the result of {parent.id} did not come across intact")
        return workspace
    except BaseException:
        remove_tree(directory)
        raise


def _worktree(
    directory: Path,
    repo: git.RepoInfo,
    store: git.Store,
    tree: str,
    ws_id: str,
    budget_bytes: int,
    subdir: str,
    scope: str,
    parent: WorkspaceBase | None = None,
) -> Workspace:
    """A detached worktree of `repo` at its HEAD holding exactly the files of `tree` (those in `scope`, when one is
    named: the worktree's own index marks the others skip-worktree, so the agent's `git status` is clean)."""
    assert repo.head is not None
    size = store.tree_bytes(tree, scope)
    if size > budget_bytes:
        raise WorkspaceError(
            f"{repo.top}: its files take {size} bytes, over the {budget_bytes} left of the disk budget"
        )
    work = directory / (repo.top.name or "work")
    git.git(["worktree", "add", "--detach", "--no-checkout", str(work), repo.head], cwd=repo.top)
    entry = Path(git.text(["rev-parse", "--absolute-git-dir"], cwd=work))
    (directory / WORKTREE_ENTRY).write_text(str(entry))  # beside the store, where no agent can change it
    store.materialize(tree, work, scope)
    git.git(["read-tree", repo.head], cwd=work)  # its own index is HEAD: `git status` shows the changes over it
    if scope:
        tracked = git.git(["ls-files", "-z"], cwd=work).split(b"\0")
        outside = b"".join(path + b"\0" for path in tracked if path and not path.startswith(os.fsencode(f"{scope}/")))
        git.git(["update-index", "--skip-worktree", "-z", "--stdin"], cwd=work, stdin=outside)
    git.git(["update-index", "-q", "--refresh"], cwd=work, check=False)
    head_tree = store.tree_of(repo.head)
    changes = store.diff(head_tree, tree, "-p", "--binary", "--full-index") if tree != head_tree else b""
    base = WorkspaceBase(
        id=ws_id,
        kind="worktree",
        source=str(repo.top),
        subdir=subdir,
        scope=scope,
        commit=repo.head,
        tree=tree,
        changes_digest=hashlib.sha256(changes).hexdigest() if changes else None,
        parent=parent.id if parent else None,
    )
    return Workspace(base=base, dir=directory, work=work, store=store, repo=repo, worktree_entry=entry)


def _copy(directory: Path, source: Path, ws_id: str, budget_bytes: int, parent: WorkspaceBase | None) -> Workspace:
    work = directory / (source.name or "work")
    _copy_tree(source, work, budget_bytes)
    store = git.Store.create(directory / "meta", [], None)
    base = WorkspaceBase(
        id=ws_id,
        kind="copy",
        source=parent.source if parent else str(source),
        tree=store.snapshot(work),
        parent=parent.id if parent else None,
        subdir=parent.subdir if parent else "",
    )
    return Workspace(base=base, dir=directory, work=work, store=store)


# ---------------------------------------------------------------------------------------------------- files


def _patch(store: git.Store, old: str, new: str, max_bytes: int) -> bytes | None:
    """`git apply` input from tree `old` to tree `new`, binary files included; None when over `max_bytes`."""
    read = store.diff_head(old, new, "-p", "--binary", "--full-index", keep=max_bytes, read_at_most=max_bytes)
    return read.data if read.whole else None


def _copy_tree(source: Path, target: Path, budget_bytes: int) -> None:
    """Copy regular files, directories and symlinks (as links), stopping as soon as the budget is spent."""
    spent = 0

    def copy(src: str, dst: str) -> object:
        nonlocal spent
        spent += os.lstat(src).st_size
        if spent > budget_bytes:
            raise WorkspaceError(f"{source}: over the {budget_bytes} bytes left of the disk budget")
        return shutil.copy2(src, dst, follow_symlinks=False)

    try:
        shutil.copytree(source, target, symlinks=True, copy_function=copy, ignore=_special_files)
    except shutil.Error as exc:  # unreadable files: name the first few
        raise WorkspaceError(f"{source}: cannot copy {[str(e[0]) for e in exc.args[0][:3]]}") from None


def _special_files(directory: str, names: list[str]) -> set[str]:
    """Sockets, fifos and devices stay behind: reading a fifo would block the copy for ever."""
    skipped = set()
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.add(name)
    return skipped


def _holds_nothing(path: Path) -> bool:
    """An empty file, or a directory (not a link) with nothing in it but empty files and directories."""
    if path.is_symlink():
        return False
    if path.is_file():
        return path.stat().st_size == 0
    return path.is_dir() and all(_holds_nothing(child) for child in path.iterdir())


def tree_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def remove_tree(path: Path) -> None:
    """Remove a tree, even where an agent took its own write permission away."""

    def retry(function: Callable[..., object], name: str, _: object) -> None:
        try:
            os.chmod(os.path.dirname(name), stat.S_IRWXU)
            function(name)
        except OSError:
            pass

    if path.exists() or path.is_symlink():
        shutil.rmtree(path, onerror=retry)


def root_holding(path: Path, roots: list[Path]) -> Path:
    """The innermost of `roots` that holds `path` (both resolved): what a workspace of `path` may contain. A path
    in no root is bounded by itself."""
    resolved = path.resolve()
    holding = [root.resolve() for root in roots if resolved.is_relative_to(root.resolve())]
    return max(holding, key=lambda root: len(root.parts), default=resolved)
