"""Git in the server never runs a program that the caller's repository or the server user's configuration names:
a workspace is made, changed, read (diff, patch) and applied back over repositories set up each way to run a
program, and the program, which would leave a marker file, never ran."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from conductor_mcp.agents.apply import apply_patch
from conductor_mcp.agents.owner import Workspaces
from tests.agents.repos import git

pytestmark = [pytest.mark.slow]  # starts processes (git)

HOOKS = ("post-checkout", "post-index-change", "reference-transaction", "pre-commit", "post-commit", "pre-applypatch")


def program(tmp_path: Path) -> tuple[Path, Path]:
    """A program that leaves `marker` and passes its input through (so git works on as if nothing ran)."""
    marker = tmp_path / "program-ran"
    path = tmp_path / "evil"
    path.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    path.chmod(0o755)
    return path, marker


def commit_attributes(repo: Path, line: str) -> None:
    """A tracked .gitattributes, committed before any driver it names exists (so that committing runs nothing)."""
    (repo / ".gitattributes").write_text(f"{line}\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")


def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str) -> None:
    """The server user's ~/.gitconfig, as `git lfs install` (or a user's diff settings) would leave it."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(config)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)


def local_filter(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: Path) -> None:
    commit_attributes(repo, "* filter=evil")
    for key in ("clean", "smudge"):
        git(repo, "config", f"filter.evil.{key}", str(evil))


def local_process_filter(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: Path) -> None:
    commit_attributes(repo, "* filter=evil")
    git(repo, "config", "filter.evil.process", str(evil))
    git(repo, "config", "filter.evil.required", "true")


def home_filter(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: Path) -> None:
    commit_attributes(repo, "* filter=lfs")
    fake_home(tmp_path, monkeypatch, f'[filter "lfs"]\n\tclean = {evil}\n\tsmudge = {evil}\n\trequired = true\n')


def hooks(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: Path) -> None:
    folder = tmp_path / "hooks"
    folder.mkdir()
    for name in HOOKS:
        for where in (folder, repo / ".git" / "hooks"):
            (where / name).symlink_to(evil)
    git(repo, "config", "core.hooksPath", str(folder))
    fake_home(tmp_path, monkeypatch, f"[core]\n\thooksPath = {folder}\n")


def fsmonitor(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: Path) -> None:
    git(repo, "config", "core.fsmonitor", str(evil))
    fake_home(tmp_path, monkeypatch, f"[core]\n\tfsmonitor = {evil}\n")


def diff_programs(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: Path) -> None:
    commit_attributes(repo, "* diff=evil merge=evil")
    drivers = f'[diff "evil"]\n\ttextconv = {evil}\n\tcommand = {evil}\n[diff]\n\texternal = {evil}\n'
    merge = f'[merge "evil"]\n\tdriver = {evil} %O %A %B\n'
    (repo / ".git" / "config").write_text((repo / ".git" / "config").read_text() + drivers + merge)
    fake_home(tmp_path, monkeypatch, drivers + merge)


Setup = Callable[[Path, Path, pytest.MonkeyPatch, Path], None]


@pytest.mark.parametrize(
    "setup",
    [local_filter, local_process_filter, home_filter, hooks, fsmonitor, diff_programs],
    ids=lambda f: f.__name__,
)
async def test_no_program_a_configuration_names_runs(
    setup: Setup, repo: Path, tmp_path: Path, owner: Workspaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    evil, marker = program(tmp_path)
    setup(repo, tmp_path, monkeypatch, evil)
    async with owner.run("safe") as scope:
        first = await scope.create(repo)
        (first.work / "mul.py").write_text("def mul(a, b):\n    return a * b\n")
        (first.work / "calc.py").write_text((first.work / "calc.py").read_text() + "# checked\n")
        second = await scope.derive(first)
        (second.work / "div.py").write_text("def div(a, b):\n    return a / b\n")
        diff = await scope.diff(second)
        patch, files = await asyncio.to_thread(second.patch_from, first)
        assert [f.path for f in diff.files] == ["div.py"] and {f.path for f in files} == {"calc.py", "mul.py", "div.py"}
        await asyncio.to_thread(apply_patch, patch, first.base)
    assert (repo / "div.py").exists() and (repo / "calc.py").read_text().endswith("# checked\n")
    assert not marker.exists(), f"{setup.__name__}: git ran {evil}"
