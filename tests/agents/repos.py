"""Callers' repositories for the agent tests: a real git repository with every kind of uncommitted change, and a
fingerprint of everything about it a workspace must leave alone."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

GIT_USER = ["-c", "user.email=caller@example.com", "-c", "user.name=Caller"]


def git(repo: Path, *args: str) -> str:
    # GIT_OPTIONAL_LOCKS=0: `git status` here must not refresh the caller's index, or the fingerprint would move.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    done = subprocess.run(["git", *GIT_USER, *args], cwd=repo, capture_output=True, text=True, check=True, env=env)
    return done.stdout


def caller_repo(path: Path) -> Path:
    """A repository with two commits, then: a staged edit, an unstaged edit, a deleted file, an untracked file,
    an ignored file, a binary file and a symlink."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# demo\n")
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (path / "old.txt").write_text("to be deleted\n")
    (path / ".gitignore").write_text("*.log\nbuild/\n__pycache__/\n")
    (path / "pkg").mkdir()
    (path / "pkg" / "core.py").write_text("VALUE = 1\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    git(path, "commit", "-qam", "second")
    (path / "README.md").write_text("# demo\n\nstaged line\n")
    git(path, "add", "README.md")
    (path / "pkg" / "core.py").write_text("VALUE = 2  # unstaged\n")
    (path / "old.txt").unlink()
    (path / "notes.txt").write_text("untracked notes\n")
    (path / "debug.log").write_text("ignored\n")
    (path / "logo.bin").write_bytes(bytes(range(256)) * 4)
    os.symlink("calc.py", path / "link.py")
    return path


def fingerprint(repo: Path) -> dict[str, object]:
    """Everything about the caller's repository an agent's workspace must not change: its files (bytes), its index,
    HEAD, branches, stashes, status and object store. Worktree metadata is left out: `git worktree add` writes it
    by design, and the tests check that it is gone again after removal."""
    files = {}
    for folder, dirs, names in os.walk(repo):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            path = Path(folder, name)
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            files[str(path.relative_to(repo))] = hashlib.sha256(data).hexdigest()
    index = repo / ".git" / "index"
    return {
        "files": files,
        "index": hashlib.sha256(index.read_bytes()).hexdigest(),
        "head": git(repo, "rev-parse", "HEAD"),
        "refs": git(repo, "for-each-ref"),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
        "stash": git(repo, "stash", "list"),
        "objects": sorted(str(p.relative_to(repo)) for p in (repo / ".git" / "objects").rglob("*")),
        "git_dir": sorted(
            str(p.relative_to(repo))
            for p in (repo / ".git").rglob("*")
            if p.relative_to(repo / ".git").parts[0] not in ("worktrees", "objects")
        ),
    }


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]
