"""The owner of every agent workspace a server makes: where they live, the disk they may take together, how many
agents may run at once, and their removal.

One `Workspaces` lives as long as the service (`async with Workspaces(root) as workspaces`). Each run opens a
scope (`async with workspaces.run(run_id) as scope`) and makes its workspaces there; the scope removes them when the
run ends, unless they are kept (for inspection). Closing the owner removes what is left. Workspaces of a process
that died are removed by the next owner that opens the same root: each owner holds a lock on its own session
directory, and a session whose lock nobody holds is gone.

Agents working in a workspace see only it: the root (every other workspace) and `hidden` (the server's state dir)
are masked in their sandbox.

The disk budget counts everything under the root (kept workspaces included). A workspace is made only within it,
and while an agent works a watcher measures the root and stops the agent once it is over (`within_budget`). Git,
file copies and measuring block, so they run in threads; a workspace whose making was cancelled is removed once its
thread is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from conductor_mcp.agents import workspace as ws
from conductor_mcp.agents.workspace import WORKTREE_ENTRY, Workspace, remove_tree, tree_size
from conductor_mcp.core.agent_records import WorkspaceDiff
from conductor_mcp.core.limits import DEFAULT_DISK_BUDGET_BYTES, DEFAULT_MAX_AGENTS, DISK_CHECK_S
from conductor_mcp.errors import DiskBudgetExceeded, WorkspaceError
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

KEPT_MARKER = "KEPT"  # a workspace directory holding this file is left for inspection
_LOCK = "owner.lock"
T = TypeVar("T")


class Workspaces:
    def __init__(
        self,
        root: Path,
        *,
        disk_budget_bytes: int = DEFAULT_DISK_BUDGET_BYTES,
        max_agents: int = DEFAULT_MAX_AGENTS,
        hidden: tuple[Path, ...] = (),
    ) -> None:
        self.root = root
        self.hidden = (root, *hidden)  # what no agent may read: every workspace but its own, and the server's state
        self.disk_budget_bytes = disk_budget_bytes
        self.max_agents = max_agents
        self._agents = asyncio.Semaphore(max_agents)
        self._making = asyncio.Lock()  # one workspace made at a time, so two cannot both pass the budget check
        self._live: dict[str, Workspace] = {}
        self._reapers: set[asyncio.Task[None]] = set()
        self._session: Path | None = None
        self._lock_fd: int | None = None

    async def __aenter__(self) -> Workspaces:
        self.root.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(_remove_dead_sessions, self.root)
        name = f"session-{os.getpid()}-{secrets.token_hex(4)}"
        making = self.root / f".making-{name}"  # not a session yet: another owner's sweep cannot take it for dead
        making.mkdir()
        self._lock_fd = os.open(making / _LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._session = making.rename(self.root / name)  # it appears already locked (the lock follows the file)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Remove every workspace not kept, wait for removals under way, and give up the session."""
        if self._reapers:
            await asyncio.gather(*self._reapers, return_exceptions=True)
        for workspace in list(self._live.values()):
            await self.release(workspace)
        if self._session is not None:
            await asyncio.to_thread(_end_session, self._session)
            self._session = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def run(self, run_id: str, *, keep: bool = False) -> RunWorkspaces:
        """The workspaces of one run, removed when it ends (`keep`: left on disk for inspection)."""
        return RunWorkspaces(self, run_id, keep)

    @contextlib.asynccontextmanager
    async def agent_slot(self) -> AsyncIterator[None]:
        """Held while an agent runs: at most `max_agents` at once; the others wait their turn."""
        async with self._agents:
            yield

    async def within_budget(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` (an agent, or a model with workspace tools) while a watcher measures the workspaces: once they
        take more than the disk budget, `work` is cancelled (an agent's processes are killed) and DiskBudgetExceeded
        raised. They are measured once more when it ends, so what it wrote between two looks counts too."""
        task, watcher = asyncio.ensure_future(work), asyncio.ensure_future(self._watch())
        try:
            await asyncio.wait([task, watcher], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for each in (task, watcher):
                each.cancel()
            await asyncio.gather(task, watcher, return_exceptions=True)
        used = watcher.result() if watcher.done() and not watcher.cancelled() else None
        if used is None and (used := await asyncio.to_thread(self.used_bytes)) <= self.disk_budget_bytes:
            return task.result()
        raise DiskBudgetExceeded(
            f"over the disk budget: the workspaces under {self.root} took {used} bytes, more than the "
            f"{self.disk_budget_bytes} of CONDUCTOR_WORKSPACE_DISK_GIB; the step was stopped"
        )

    async def _watch(self) -> int:
        """What the workspaces take, returned once it is over the budget (measured every DISK_CHECK_S, or ten times
        as long as measuring took, so that a large tree costs at most a tenth of a thread)."""
        while True:
            started = time.monotonic()
            used = await asyncio.to_thread(self.used_bytes)
            if used > self.disk_budget_bytes:
                return used
            await asyncio.sleep(max(DISK_CHECK_S, 10 * (time.monotonic() - started)))

    def used_bytes(self) -> int:
        """What everything under the root takes now (blocking: it walks the tree)."""
        return tree_size(self.root)

    async def make(self, make: Callable[[Path, str, int], Workspace]) -> Workspace:
        """A new workspace from `make(directory, id, bytes left of the budget)`, run in a thread."""
        if self._session is None:
            raise WorkspaceError("the workspace owner is not open (use `async with Workspaces(...)`)")
        ws_id = secrets.token_hex(6)
        directory = self._session / ws_id
        async with self._making:
            left = self.disk_budget_bytes - await asyncio.to_thread(self.used_bytes)
            if left <= 0:
                raise WorkspaceError(
                    f"the workspaces under {self.root} take the whole disk budget ({self.disk_budget_bytes} bytes): "
                    "remove kept ones or raise the budget"
                )
            future = asyncio.ensure_future(asyncio.to_thread(make, directory, ws_id, left))
            try:
                workspace = await asyncio.shield(future)
            except asyncio.CancelledError:
                self._reap_when_done(future)
                raise
        workspace.hidden = self.hidden
        self._live[ws_id] = workspace
        log.info("workspace_made", workspace=ws_id, kind=workspace.base.kind, source=workspace.base.source)
        return workspace

    async def release(self, workspace: Workspace) -> None:
        """Forget a workspace and remove it from disk, unless it is kept."""
        self._live.pop(workspace.id, None)
        if workspace.keep:
            await asyncio.to_thread((workspace.dir / KEPT_MARKER).write_text, f"{workspace.base.model_dump_json()}\n")
            log.info("workspace_kept", workspace=workspace.id, path=str(workspace.work))
            return
        await asyncio.shield(asyncio.to_thread(workspace.remove))

    def _reap_when_done(self, future: asyncio.Future[Workspace]) -> None:
        async def reap() -> None:
            with contextlib.suppress(Exception):
                made = await future
                await asyncio.to_thread(made.remove)

        task = asyncio.get_running_loop().create_task(reap())
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)


class RunWorkspaces:
    """One run's workspaces; `async with` removes them at the end (kept ones stay, named in the log)."""

    def __init__(self, owner: Workspaces, run_id: str, keep: bool) -> None:
        self.owner, self.run_id, self.keep = owner, run_id, keep
        self.workspaces: list[Workspace] = []

    async def __aenter__(self) -> RunWorkspaces:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for workspace in reversed(self.workspaces):  # a derived workspace goes before the one it came from
            await self.owner.release(workspace)
        self.workspaces.clear()

    async def create(self, source: Path, bound: Path | None = None) -> Workspace:
        """A workspace holding `source` as the caller has it now (a worktree of its repository, or a copy), and
        nothing outside `bound` (the root that holds it; by default `source` itself)."""
        return self._add(await self.owner.make(lambda d, i, left: ws.create(d, source, i, left, bound)))

    async def derive(self, parent: Workspace) -> Workspace:
        """A workspace that starts from `parent`'s result (a second agent building on the first one's work)."""
        return self._add(await self.owner.make(lambda d, i, left: ws.derive(d, parent, i, left)))

    async def diff(self, workspace: Workspace, max_bytes: int = ws.DIFF_MAX_BYTES) -> WorkspaceDiff:
        """The workspace's change since its base, bounded (git runs in a thread)."""
        return await asyncio.to_thread(workspace.diff, max_bytes)

    async def patch(self, workspace: Workspace) -> bytes:
        """The whole change as a patch `git apply` takes, binary files included (for `apply`)."""
        return await asyncio.to_thread(workspace.patch)

    def _add(self, workspace: Workspace) -> Workspace:
        workspace.keep = self.keep
        self.workspaces.append(workspace)
        return workspace


# ------------------------------------------------------------------------------------------------ sessions


def _remove_dead_sessions(root: Path) -> None:
    """Remove what processes that died left under `root` (their session lock is free), kept workspaces aside."""
    for session in root.glob("session-*"):
        lock = session / _LOCK
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live owner holds it
        try:
            log.warning("workspaces_left_by_a_dead_process", session=session.name)
            _end_session(session)
        finally:
            os.close(fd)


def _end_session(session: Path) -> None:
    """Remove a session's workspaces but the kept ones; the session directory goes once nothing is kept."""
    for directory in session.iterdir():
        if directory.is_dir() and not (directory / KEPT_MARKER).exists():
            _remove_orphan(directory)
    if not any(d.is_dir() for d in session.iterdir()):
        remove_tree(session)


def _remove_orphan(directory: Path) -> None:
    """A workspace directory whose Workspace object is gone: its worktree entry (if any) goes with it. The entry's
    path is read from the workspace's store, never from the `.git` file in its tree (which the agent could change)."""
    recorded = directory / WORKTREE_ENTRY
    if recorded.is_file():
        entry = Path(recorded.read_text().strip())
        if entry.parent.name == "worktrees":
            remove_tree(entry)
    remove_tree(directory)
