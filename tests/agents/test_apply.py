"""`apply` writes the patch into the caller's tree only: never through a symbolic link (an ignored one, which no
snapshot and no index shows, included), never outside the tree."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from conductor_mcp.agents.apply import PatchRefused, apply_patch
from conductor_mcp.agents.owner import Workspaces
from tests.agents.repos import git

pytestmark = [pytest.mark.slow]  # starts processes (git)


async def test_apply_refuses_to_write_through_an_ignored_link(repo: Path, tmp_path: Path, owner: Workspaces) -> None:
    """The repository ignores `build`, a link out of it (as `.venv`, `node_modules` or `data` links often are); the
    agent empties .gitignore and writes build/x. Nothing is applied, the error names the path and the link."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / ".gitignore").write_text("build\n")
    git(repo, "commit", "-qm", "ignore build", ".gitignore")
    (repo / "build").symlink_to(elsewhere)
    async with owner.run("links") as scope:
        ws = await scope.create(repo)
        assert not (ws.work / "build").exists()  # ignored: not in the workspace
        (ws.work / ".gitignore").write_text("")
        (ws.work / "build").mkdir()
        (ws.work / "build" / "x").write_text("written by the agent\n")
        patch = ws.patch()
        assert b"b/build/x" in patch
        with pytest.raises(PatchRefused) as refused:
            await asyncio.to_thread(apply_patch, patch, ws.base)
    assert "'build/x'" in str(refused.value) and "build is a symbolic link" in str(refused.value)
    assert str(elsewhere) in str(refused.value) and "nothing was applied" in str(refused.value)
    assert os.listdir(elsewhere) == [] and (repo / ".gitignore").read_text() == "build\n"


async def test_apply_refuses_a_link_the_tree_shows_too(repo: Path, tmp_path: Path, owner: Workspaces) -> None:
    """An untracked link (not ignored) the agent replaced with a folder: the patch removes the link and writes under
    its name; apply refuses any path under a link in the caller's tree rather than judge where it leads."""
    elsewhere = tmp_path / "data-store"
    elsewhere.mkdir()
    (repo / "data").symlink_to(elsewhere)
    async with owner.run("links") as scope:
        ws = await scope.create(repo)
        assert (ws.work / "data").is_symlink()
        (ws.work / "data").unlink()
        (ws.work / "data").mkdir()
        (ws.work / "data" / "rows.csv").write_text("a,b\n")
        with pytest.raises(PatchRefused, match=r"'data/rows.csv'.*data is a symbolic link"):
            await asyncio.to_thread(apply_patch, ws.patch(), ws.base)
    assert os.listdir(elsewhere) == [] and (repo / "data").is_symlink()


async def test_apply_refuses_a_path_outside_the_root_the_workspace_held(repo: Path, owner: Workspaces) -> None:
    async with owner.run("scope") as scope:
        bounded = await scope.create(repo / "pkg", bound=repo / "pkg")
        whole = await scope.create(repo)
        (whole.work / "calc.py").write_text("changed above the root\n")
        with pytest.raises(PatchRefused, match=r"'calc.py', outside pkg"):
            await asyncio.to_thread(apply_patch, whole.patch(), bounded.base)
    assert (repo / "calc.py").read_text().startswith("def add")
