"""Git as the workspaces use it: one way to run it, and a private object store per workspace.

Each workspace keeps its own bare repository (its "meta" store) whose objects borrow the caller's through
alternates. Snapshots of a directory (`git add -A` into a private index, then `write-tree`) write only there, so
the caller's repository gains nothing but the worktree entry that `git worktree add` makes. Every command names its
git directory and work tree explicitly: a `.git` file inside a workspace is the agent's to change, and is never
what tells the server which repository (and which configuration, hooks or filters) to use.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conductor_mcp.config import child_environment
from conductor_mcp.errors import WorkspaceError

GIT_TIMEOUT_S = 300.0
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Never run a program the repository's settings or attributes name while reading a workspace.
# Files are written and hashed byte for byte: what the agent sees is what the caller has.
_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.autocrlf=false")
_NOT_INSTALLED = "git is not installed: workspaces need it (apt-get install git)"
_CHUNK = 256 * 1024
_ERROR_TAIL_BYTES = 4096


def git(
    args: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None, stdin: bytes | None = None, check: bool = True
) -> bytes:
    """Run git; its stdout, or (when `check`) WorkspaceError with the end of its stderr if it fails."""
    command, full_env = _invocation(args, env)
    try:
        done = subprocess.run(
            command, cwd=cwd, env=full_env, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise WorkspaceError(_NOT_INSTALLED) from None
    except subprocess.TimeoutExpired:
        raise WorkspaceError(_too_long(args, cwd)) from None
    if check and done.returncode != 0:
        raise _failed(args, cwd, done.returncode, done.stderr)
    return done.stdout


@dataclass(frozen=True)
class Head:
    """The start of a command's output, read in bounded memory."""

    data: bytes  # its first bytes
    size: int  # how many bytes it wrote; when not `whole`, how many were read before reading stopped
    whole: bool  # it was read to its end


def head(args: Sequence[str], *, cwd: Path, env: dict[str, str] | None, keep: int, read_at_most: int) -> Head:
    """Run git keeping the first `keep` bytes of its output and counting the rest, up to `read_at_most`: past that
    git is stopped. Its output may be far larger than what memory should hold (an agent's change)."""
    command, full_env = _invocation(args, env)
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                bufsize=0,
            )
        except FileNotFoundError:
            raise WorkspaceError(_NOT_INSTALLED) from None
        expired = threading.Event()
        late = threading.Timer(GIT_TIMEOUT_S, lambda: (expired.set(), proc.kill()))
        late.start()
        stdout = proc.stdout
        assert stdout is not None
        data, size, whole = bytearray(), 0, False
        try:
            while size <= read_at_most:
                chunk = stdout.read(_CHUNK)
                if not chunk:
                    whole = True
                    break
                size += len(chunk)
                data += chunk[: max(0, keep - len(data))]
        finally:
            if not whole:  # stopped where reading stopped (or at an error of ours)
                proc.kill()
            stdout.close()
            status = proc.wait()
            late.cancel()
        if expired.is_set():
            raise WorkspaceError(_too_long(args, cwd))
        if whole and status != 0:
            errors.seek(max(0, errors.seek(0, os.SEEK_END) - _ERROR_TAIL_BYTES))
            raise _failed(args, cwd, status, errors.read())
    return Head(bytes(data), size, whole)


def _invocation(args: Sequence[str], env: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    """The command line and the whole environment git runs with."""
    base = {k: v for k, v in child_environment().items() if not k.startswith("GIT_")}
    return ["git", *_SAFE, *args], {**base, "GIT_TERMINAL_PROMPT": "0", **(env or {})}


def _too_long(args: Sequence[str], cwd: Path) -> str:
    return f"git {args[0]} took over {GIT_TIMEOUT_S:.0f}s in {cwd}"


def _failed(args: Sequence[str], cwd: Path, status: int, stderr: bytes) -> WorkspaceError:
    detail = stderr.decode(errors="replace").strip()[-500:]
    return WorkspaceError(f"git {args[0]} failed in {cwd}: {detail or f'exit status {status}'}")


def text(args: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    return git(args, cwd=cwd, env=env).decode().strip()


@dataclass(frozen=True)
class RepoInfo:
    """The git repository that holds a directory."""

    top: Path  # the work tree's root
    common_dir: Path  # the repository's .git (shared by all its worktrees)
    head: str | None  # HEAD's commit, None before the first commit


def repository_of(path: Path) -> RepoInfo | None:
    """The repository whose work tree holds `path`, or None when it is in none (or is inside a .git directory)."""
    try:
        inside = text(["rev-parse", "--is-inside-work-tree"], cwd=path)
    except WorkspaceError as exc:
        if "dubious ownership" in str(exc):  # the repository belongs to another user: say so, do not copy it
            raise WorkspaceError(f"{path}: git refuses a repository owned by another user: {exc}") from None
        return None
    if inside != "true":
        return None
    top = Path(text(["rev-parse", "--show-toplevel"], cwd=path))
    common = Path(text(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=path))
    try:
        head: str | None = text(["rev-parse", "--verify", "-q", "HEAD^{commit}"], cwd=path)
    except WorkspaceError:
        head = None
    return RepoInfo(top=top, common_dir=common, head=head or None)


@dataclass
class Store:
    """A workspace's private object store and index: snapshots of a directory as git trees, written here only."""

    git_dir: Path
    borrowed: list[Path] = field(default_factory=list)  # object directories read through alternates

    @classmethod
    def create(cls, git_dir: Path, borrowed: list[Path], exclude_from: Path | None) -> Store:
        git(["init", "-q", "--bare", str(git_dir)], cwd=git_dir.parent)
        if exclude_from is not None and exclude_from.is_file():  # the caller's own ignore rules (info/exclude)
            (git_dir / "info").mkdir(exist_ok=True)
            (git_dir / "info" / "exclude").write_bytes(exclude_from.read_bytes())
        return cls(git_dir, borrowed)

    def env(self, work_tree: Path, index: str = "index") -> dict[str, str]:
        return {
            "GIT_DIR": str(self.git_dir),
            "GIT_WORK_TREE": str(work_tree),
            "GIT_INDEX_FILE": str(self.git_dir / index),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": ":".join(str(p) for p in self.borrowed),
        }

    def snapshot(self, work_tree: Path, index: str = "index") -> str:
        """The tree id of `work_tree` as it is now: tracked and untracked files, ignored ones left out."""
        env = self.env(work_tree, index)
        git(["add", "-A", "--ignore-errors", "."], cwd=work_tree, env=env)
        return text(["write-tree"], cwd=work_tree, env=env)

    def materialize(self, tree: str, work_tree: Path) -> None:
        """Write the files of `tree` into `work_tree` (exactly their bytes: no filters of the caller's run)."""
        env = self.env(work_tree, index="materialize-index")
        git(["read-tree", tree], cwd=work_tree, env=env)
        git(["checkout-index", "-a", "-f"], cwd=work_tree, env=env)
        (self.git_dir / "materialize-index").unlink(missing_ok=True)

    def tree_bytes(self, tree: str) -> int:
        """The total size of the files in `tree`, read from the object store without writing anything."""
        listing = git(["ls-tree", "-r", "-l", "-z", tree], cwd=self.git_dir, env=self.env(self.git_dir))
        sizes = (entry.split(b"\t", 1)[0].split()[-1] for entry in listing.split(b"\0") if entry)
        return sum(int(size) for size in sizes if size.isdigit())

    def diff(self, old: str, new: str, *extra: str) -> bytes:
        """`git diff-tree` between two trees: a unified diff, or what `extra` asks for."""
        return git(self._diff_args(old, new, extra), cwd=self.git_dir, env=self.env(self.git_dir))

    def diff_head(self, old: str, new: str, *extra: str, keep: int, read_at_most: int) -> Head:
        """`diff` read in bounded memory: its first `keep` bytes, its size counted up to `read_at_most`."""
        args = self._diff_args(old, new, extra)
        return head(args, cwd=self.git_dir, env=self.env(self.git_dir), keep=keep, read_at_most=read_at_most)

    @staticmethod
    def _diff_args(old: str, new: str, extra: Sequence[str]) -> list[str]:
        return ["diff-tree", "-r", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", *extra, old, new]

    def blob_sizes(self, blobs: Sequence[str]) -> dict[str, int]:
        """The size of each of `blobs` the store holds (the null id, a deleted file's, is not asked for)."""
        asked = [blob for blob in blobs if blob.strip("0")]
        if not asked:
            return {}
        query = ("\n".join(asked) + "\n").encode()
        answer = git(
            ["cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)"],
            cwd=self.git_dir,
            env=self.env(self.git_dir),
            stdin=query,
        )
        found = (line.split(" ") for line in answer.decode().splitlines())
        return {fields[0]: int(fields[2]) for fields in found if len(fields) == 3 and fields[1] == "blob"}

    def tree_of(self, commit: str) -> str:
        return text(["rev-parse", f"{commit}^{{tree}}"], cwd=self.git_dir, env=self.env(self.git_dir))
