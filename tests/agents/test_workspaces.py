"""Workspaces against real git: what an agent's copy holds, its base and diff, a workspace built on another's
result, removal, the disk budget, and the caller's repository left exactly as it was."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from conductor_mcp.agents.apply import apply_patch
from conductor_mcp.agents.owner import KEPT_MARKER, Workspaces
from conductor_mcp.agents.tools import WorkspaceTools
from conductor_mcp.errors import WorkspaceError
from tests.agents.repos import caller_repo, fingerprint, git, worktrees

pytestmark = [pytest.mark.slow]  # starts processes (git, bubblewrap, agent programs)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return caller_repo(tmp_path / "caller")


@pytest.fixture
async def owner(tmp_path: Path):
    async with Workspaces(tmp_path / "workspaces") as workspaces:
        yield workspaces


async def test_a_worktree_holds_what_the_caller_sees_and_the_caller_is_untouched(repo: Path, owner: Workspaces) -> None:
    before = fingerprint(repo)
    async with owner.run("r1") as scope:
        ws = await scope.create(repo)
        assert ws.base.kind == "worktree" and ws.base.commit == git(repo, "rev-parse", "HEAD").strip()
        assert ws.base.changes_digest is not None and len(ws.base.changes_digest) == 64
        work = ws.work
        assert (work / "README.md").read_text() == "# demo\n\nstaged line\n"  # staged
        assert (work / "pkg" / "core.py").read_text() == "VALUE = 2  # unstaged\n"  # unstaged
        assert not (work / "old.txt").exists()  # deleted
        assert (work / "notes.txt").read_text() == "untracked notes\n"  # untracked
        assert not (work / "debug.log").exists()  # ignored stays behind
        assert (work / "logo.bin").read_bytes() == (repo / "logo.bin").read_bytes()
        assert os.readlink(work / "link.py") == "calc.py"
        status = git(work, "status", "--porcelain")  # the agent's git sees the caller's changes over HEAD
        assert " M pkg/core.py" in status and "?? notes.txt" in status and " D old.txt" in status
        assert ws.diff().text == "" and ws.diff().files == []  # nothing changed yet: the base is the caller's state
        assert len(worktrees(repo)) == 2
        assert fingerprint(repo) == before
    assert fingerprint(repo) == before
    assert not ws.dir.exists() and len(worktrees(repo)) == 1  # gone, and so is its entry in the caller's .git


async def test_the_diff_names_new_changed_deleted_and_binary_files(repo: Path, owner: Workspaces) -> None:
    before = fingerprint(repo)
    async with owner.run("r2") as scope:
        ws = await scope.create(repo)
        (ws.work / "calc.py").write_text((ws.work / "calc.py").read_text() + "\n\ndef mul(a, b):\n    return a * b\n")
        (ws.work / "new_module.py").write_text("ANSWER = 42\n")
        (ws.work / "notes.txt").unlink()
        (ws.work / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(300))
        (ws.work / "build").mkdir()
        (ws.work / "build" / "out.o").write_bytes(b"ignored output")
        diff = ws.diff()
        by_path = {f.path: f for f in diff.files}
        assert set(by_path) == {"calc.py", "new_module.py", "notes.txt", "image.png"}
        assert by_path["calc.py"].status == "modified" and by_path["calc.py"].added == 4
        assert by_path["new_module.py"].status == "added" and "+ANSWER = 42" in diff.text
        assert by_path["notes.txt"].status == "deleted" and by_path["notes.txt"].removed == 1
        assert by_path["image.png"].binary and by_path["image.png"].added is None
        assert (by_path["image.png"].size, by_path["notes.txt"].size) == (308, None)  # a deleted file has none
        assert "Binary files /dev/null and b/image.png differ" in diff.text and "PNG" not in diff.text
        assert not diff.truncated and diff.added == 5 and diff.removed == 1
        patch = ws.patch()  # the whole change, binary included, applies where the caller's tree still matches
        assert b"GIT binary patch" in patch
    assert fingerprint(repo) == before
    _applies(repo, patch)


def _applies(repo: Path, patch: bytes) -> None:
    """`git apply --check` of the patch on a copy of the caller's tree as it is."""
    clone = repo.parent / "clone"
    subprocess.run(["cp", "-a", str(repo), str(clone)], check=True)
    subprocess.run(["git", "apply", "--check", "-"], cwd=clone, input=patch, check=True)


async def test_a_long_diff_is_cut_at_a_line_with_a_marker(repo: Path, owner: Workspaces) -> None:
    async with owner.run("r3") as scope:
        ws = await scope.create(repo)
        (ws.work / "big.txt").write_text("".join(f"line {n}\n" for n in range(5000)))
        diff = ws.diff(max_bytes=2000)
    assert diff.truncated and len(diff.text.encode()) <= 2000 and diff.full_bytes > 30_000
    body, marker = diff.text.rsplit("\n[diff truncated:", 1)
    assert body.endswith("\n") and body.splitlines()[-1].startswith(
        ("+line", "@@", "+++", "---", "diff", "new", "index")
    )
    assert "1 files changed in all, +5000 -0 lines" in marker


async def test_a_change_over_the_patch_cap_is_summarised_in_bounded_memory(repo: Path, owner: Workspaces) -> None:
    async with owner.run("r-large") as scope:
        ws = await scope.create(repo)
        (ws.work / "big.txt").write_text("".join(f"line {n}\n" for n in range(50_000)))  # 539 kB of text
        (ws.work / "calc.py").write_text("")
        patch, files = ws.patch_from(ws, max_bytes=64 * 1024)
        diff = ws.diff(max_bytes=2000)
        with pytest.raises(WorkspaceError, match=f"its patch is over {64 * 1024} bytes"):
            ws.patch(max_bytes=64 * 1024)
    assert patch is None  # too large to keep: not read past the cap
    by_path = {f.path: f for f in files}  # but what it changed is all there
    assert (by_path["big.txt"].status, by_path["big.txt"].size, by_path["big.txt"].added) == ("added", 538_890, 50_000)
    assert (by_path["calc.py"].size, by_path["calc.py"].removed) == (0, 6)
    assert diff.truncated and len(diff.text.encode()) <= 2000 and diff.full_bytes > 500_000


async def test_a_second_workspace_starts_from_the_firsts_result(repo: Path, owner: Workspaces) -> None:
    async with owner.run("r4") as scope:
        first = await scope.create(repo)
        (first.work / "feature.py").write_text("def feature():\n    return 1\n")
        second = await scope.derive(first)
        assert second.base.parent == first.id and second.base.commit == first.base.commit
        assert (second.work / "feature.py").exists() and (second.work / "notes.txt").exists()
        assert second.diff().files == []  # its base is the first one's result
        (second.work / "feature.py").write_text("def feature():\n    return 2\n")
        diff = second.diff()
        assert [f.path for f in diff.files] == ["feature.py"] and "-    return 1" in diff.text
        assert [f.path for f in first.diff().files] == ["feature.py"]  # the first one's own work is unchanged
        first_dir = first.dir
    assert not first_dir.exists() and len(worktrees(repo)) == 1


async def test_a_directory_outside_git_is_copied(tmp_path: Path, owner: Workspaces) -> None:
    plain = tmp_path / "plain"
    (plain / "src").mkdir(parents=True)
    (plain / "src" / "a.txt").write_text("a\n")
    os.mkfifo(plain / "pipe")  # copied, a fifo would block the copy for ever
    async with owner.run("r5") as scope:
        ws = await scope.create(plain)
        assert ws.base.kind == "copy" and ws.base.commit is None and ws.repo is None
        assert (ws.work / "src" / "a.txt").read_text() == "a\n" and not (ws.work / "pipe").exists()
        (ws.work / "src" / "a.txt").write_text("b\n")
        assert [f.path for f in ws.diff().files] == ["src/a.txt"]
        second = await scope.derive(ws)
        assert second.base.kind == "copy" and (second.work / "src" / "a.txt").read_text() == "b\n"
    assert (plain / "src" / "a.txt").read_text() == "a\n"


async def test_a_subdirectory_is_worked_in_within_the_whole_repository(repo: Path, owner: Workspaces) -> None:
    async with owner.run("r6") as scope:
        ws = await scope.create(repo / "pkg", bound=repo)  # the root is the repository: all of it is there
        assert ws.base.subdir == "pkg" and ws.cwd == ws.work / "pkg" and (ws.work / "calc.py").exists()


async def test_a_root_inside_the_repository_bounds_what_the_workspace_holds(repo: Path, owner: Workspaces) -> None:
    """CONDUCTOR_ROOTS a folder of a repository: the workspace holds that folder only (tracked and untracked files
    above it are neither copied nor readable), the agent's git sees no change, and the patch is the repository's."""
    (repo / "pkg" / "draft.py").write_text("untracked under the root\n")
    before = fingerprint(repo)
    async with owner.run("r6b") as scope:
        ws = await scope.create(repo / "pkg", bound=repo / "pkg")
        assert ws.base.scope == "pkg" and ws.cwd == ws.work / "pkg"
        assert (ws.work / "pkg" / "core.py").read_text() == "VALUE = 2  # unstaged\n"  # the caller's file, as it is
        assert (ws.work / "pkg" / "draft.py").exists()
        assert sorted(p.name for p in ws.work.iterdir()) == [".git", "pkg"]  # calc.py, README.md, notes.txt: not there
        tools = WorkspaceTools(ws, ["read", "search"], "read-only")
        for above in ("calc.py", "notes.txt", "README.md", "../calc.py"):
            answer = await tools.call("read", json.dumps({"path": above}))
            assert answer.error and "demo" not in answer.output and "untracked notes" not in answer.output
        assert git(ws.work, "status", "--porcelain") == " M pkg/core.py\n?? pkg/draft.py\n"  # nothing above: deleted
        (ws.work / "pkg" / "mul.py").write_text("def mul(a, b):\n    return a * b\n")
        (ws.work / "stray.txt").write_text("written above the root")  # outside its scope: not part of its work
        diff = ws.diff()
        assert [f.path for f in diff.files] == ["pkg/mul.py"]
        patch = ws.patch()
        second = await scope.derive(ws)
        assert second.base.scope == "pkg" and not (second.work / "calc.py").exists() and second.diff().files == []
        assert fingerprint(repo) == before
        await asyncio.to_thread(apply_patch, patch, ws.base)  # the caller's tree is still the one it was made from
    assert (repo / "pkg" / "mul.py").exists() and not (repo / "stray.txt").exists()


async def test_kept_workspaces_stay_for_inspection(repo: Path, owner: Workspaces) -> None:
    async with owner.run("r7", keep=True) as scope:
        ws = await scope.create(repo)
    assert ws.work.is_dir() and (ws.dir / KEPT_MARKER).read_text().startswith("{")
    await owner.close()
    assert ws.work.is_dir()  # closing the owner leaves kept ones too


async def test_the_disk_budget_refuses_a_workspace_and_leaves_nothing(repo: Path, tmp_path: Path) -> None:
    async with Workspaces(tmp_path / "small", disk_budget_bytes=500) as owner, owner.run("r8") as scope:
        with pytest.raises(WorkspaceError, match="disk budget"):
            await scope.create(repo)
        assert not any(p.is_dir() for session in (tmp_path / "small").iterdir() for p in session.iterdir())
    assert len(worktrees(repo)) == 1


async def test_a_cancelled_make_is_removed_when_its_thread_ends(repo: Path, tmp_path: Path) -> None:
    async with Workspaces(tmp_path / "cancel") as owner:
        task = asyncio.create_task(owner.run("r9").create(repo))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not [p for p in (tmp_path / "cancel").rglob("*") if p.is_dir()] and len(worktrees(repo)) == 1


async def test_workspaces_of_a_dead_process_are_removed_by_the_next_owner(repo: Path, tmp_path: Path) -> None:
    root = tmp_path / "shared"
    async with Workspaces(root) as first:
        await first.run("r10").create(repo)  # never released: as if the process died now
        session = next(root.glob("session-*"))
        async with Workspaces(root):  # a live owner's session is not touched
            assert session.exists()
        os.close(first._lock_fd or -1)  # the process "dies": its lock is free
        first._lock_fd, first._session, first._live = None, None, {}
    async with Workspaces(root):
        assert not session.exists()
    assert len(worktrees(repo)) == 1


async def test_the_agent_cap_lets_that_many_run_at_once(tmp_path: Path) -> None:
    running, peak = 0, 0

    async def agent(owner: Workspaces) -> None:
        nonlocal running, peak
        async with owner.agent_slot():
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1

    async with Workspaces(tmp_path / "cap", max_agents=2) as owner:
        await asyncio.gather(*(agent(owner) for _ in range(6)))
    assert peak == 2
