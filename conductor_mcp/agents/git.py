"""Git as the workspaces use it: one way to run it, and a private object store per workspace.

Each workspace keeps its own bare repository (its "meta" store) whose objects borrow the caller's through
alternates. Snapshots of a directory (`git add -A` into a private index, then `write-tree`) write only there, so
the caller's repository gains nothing but the worktree entry that `git worktree add` makes. Every command names its
git directory and work tree explicitly: a `.git` file inside a workspace is the agent's to change, and is never
what tells the server which repository (and which configuration, hooks or filters) to use.

Git never runs a program that a repository or the server user's configuration names (`git` below is the one place
that runs it). The user's global and the system configuration are not read at all (a `git lfs install` leaves a
filter driver there). The repository's own configuration (`.git/config`, its includes, a worktree's config) is
read, so before each command on it the configuration that command would read is listed and every key that names
a program (filter, diff and merge drivers, hooks, fsmonitor, ssh, editors, helpers) is overridden with a value that
runs nothing (a Store's configuration is only what `init` wrote: it is not listed). The overrides travel as
GIT_CONFIG_COUNT/KEY/VALUE: unlike `-c`, a name holding `=` cannot break them.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conductor_mcp.config import child_environment
from conductor_mcp.core.limits import GIT_ERROR_TAIL_BYTES, GIT_TIMEOUT_S
from conductor_mcp.errors import WorkspaceError

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Set for every command. Files are written and hashed byte for byte: what the agent sees is what the caller has.
_FIXED = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "core.autocrlf": "false",
    "core.attributesFile": "/dev/null",
    "diff.external": "",
    "gc.auto": "0",
    "maintenance.auto": "false",
}
# Keys that name a program to run (section.[subsection.]key, as `git config --list` names them), each set to "", which
# runs nothing; those of _FIXED (hooks, fsmonitor, diff.external) are already set, after every file is read.
_PROGRAM_KEY = re.compile(
    r"filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver|sequence\.editor"
    r"|core\.(sshcommand|gitproxy|askpass|editor|pager|alternaterefscommand)|gpg(\..+)?\.program"
    r"|credential(\..+)?\.helper|uploadpack\.packobjectshook|remote\..+\.(uploadpack|receivepack|vcs)",
    re.IGNORECASE | re.DOTALL,
)
_CHUNK = 256 * 1024
_REQUIRED_FILTER = re.compile(r"filter\..+\.required", re.IGNORECASE | re.DOTALL)  # "" would make git die instead


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
    own_config: bool = False,
) -> bytes:
    """Run git with no program of any configuration's choosing; its stdout, or (when `check`) WorkspaceError with
    the end of its stderr if it fails. `own_config`: the repository is a Store, whose configuration only `init`
    wrote, so it is not listed (half the processes of a snapshot)."""
    done = _run(args, cwd, _invocation(cwd, env, own_config), stdin)
    if check and done.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed in {cwd}: {_tail(done)}")
    return done.stdout


def _invocation(cwd: Path, env: dict[str, str] | None, own_config: bool) -> dict[str, str]:
    """The whole environment git runs with in `cwd`: no user or system configuration, and every key of the
    repository's own that names a program set to run nothing (`own_config`: a Store's, which only `init` wrote)."""
    base = {k: v for k, v in child_environment().items() if not k.startswith("GIT_")}
    environment = {
        **base,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        **(env or {}),
    }
    overrides = dict(_FIXED)
    listed = b"" if own_config else _listed_config(cwd, environment)
    for raw in listed.split(b"\0"):
        name = raw.decode(errors="surrogateescape")
        if _PROGRAM_KEY.fullmatch(name):
            overrides[name] = ""
        elif _REQUIRED_FILTER.fullmatch(name):
            overrides[name] = "false"
    return {**environment, **_config_env(overrides)}


def _listed_config(cwd: Path, environment: dict[str, str]) -> bytes:
    """The names of every configuration key a command run with `environment` in `cwd` would read."""
    listed = _run(["config", "--list", "--name-only", "-z"], cwd, {**environment, **_config_env(_FIXED)}, None)
    if listed.returncode != 0:
        raise WorkspaceError(f"git config could not be read in {cwd}: {_tail(listed)}")
    return listed.stdout


def _config_env(overrides: dict[str, str]) -> dict[str, str]:
    pairs = list(overrides.items())
    numbered = {
        f"GIT_CONFIG_{part}_{n}": value
        for n, pair in enumerate(pairs)
        for part, value in zip(("KEY", "VALUE"), pair, strict=True)
    }
    return {"GIT_CONFIG_COUNT": str(len(pairs)), **numbered}


def _run(
    args: Sequence[str], cwd: Path, env: dict[str, str], stdin: bytes | None
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise WorkspaceError("git is not installed: workspaces need it (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {args[0]} took over {GIT_TIMEOUT_S:.0f}s in {cwd}") from None


def _tail(done: subprocess.CompletedProcess[bytes]) -> str:
    detail = done.stderr.decode(errors="replace").strip()[-500:]
    return detail or f"exit status {done.returncode}"


@dataclass(frozen=True)
class Head:
    """The start of a command's output, read in bounded memory."""

    data: bytes  # its first bytes
    size: int  # how many bytes it wrote; when not `whole`, how many were read before reading stopped
    whole: bool  # it was read to its end


def head(
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None,
    keep: int,
    read_at_most: int,
    own_config: bool = False,
) -> Head:
    """Run git keeping the first `keep` bytes of its output and counting the rest, up to `read_at_most`: past that
    git is stopped. Its output may be far larger than what memory should hold (an agent's change)."""
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(
                ["git", *args],
                cwd=cwd,
                env=_invocation(cwd, env, own_config),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                bufsize=0,
            )
        except FileNotFoundError:
            raise WorkspaceError("git is not installed: workspaces need it (apt-get install git)") from None
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
            raise WorkspaceError(f"git {args[0]} took over {GIT_TIMEOUT_S:.0f}s in {cwd}")
        if whole and status != 0:
            errors.seek(max(0, errors.seek(0, os.SEEK_END) - GIT_ERROR_TAIL_BYTES))
            detail = errors.read().decode(errors="replace").strip()[-500:]
            raise WorkspaceError(f"git {args[0]} failed in {cwd}: {detail or f'exit status {status}'}")
    return Head(bytes(data), size, whole)


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
            "GIT_LITERAL_PATHSPECS": "1",  # a folder named `:(glob)x` is that folder
        }

    def run(self, args: Sequence[str], work_tree: Path, index: str = "index", stdin: bytes | None = None) -> bytes:
        """Run git on this store, with `work_tree` as its work tree."""
        return git(args, cwd=work_tree, env=self.env(work_tree, index), stdin=stdin, own_config=True)

    def snapshot(self, work_tree: Path, index: str = "index", within: str = "") -> str:
        """The tree id of `work_tree` as it is now: tracked and untracked files, ignored ones left out. With
        `within` (a relative folder) only that folder is read: the index keeps what it held for everything else."""
        self.run(["add", "-A", "--ignore-errors", "--", within or "."], work_tree, index)
        return self.run(["write-tree"], work_tree, index).decode().strip()

    def snapshot_over(self, commit: str, work_tree: Path, index: str, within: str) -> str:
        """The tree of a repository's work tree as its user has it: `commit` with the changes made since (staged,
        unstaged, untracked but not ignored; tracked files stay even when ignored), read only `within` (a relative
        folder, '' for all): outside it the commit's files stand."""
        self.read_tree(commit, work_tree, index)
        return self.snapshot(work_tree, index, within)

    def read_tree(self, tree: str, work_tree: Path, index: str = "index") -> None:
        """Make the index hold `tree`, with no stat data (a snapshot then reads every file it covers)."""
        self.run(["read-tree", tree], work_tree, index)

    def materialize(self, tree: str, work_tree: Path, within: str = "") -> None:
        """Write the files of `tree` into `work_tree` (exactly their bytes: no filters of the caller's run), only
        those `within` a relative folder when one is named. The store's index then holds `tree`, so that later
        snapshots (`within` the same folder) keep the rest of it as it is."""
        self.read_tree(tree, work_tree)
        if not within:
            self.run(["checkout-index", "-a", "-f", "-u"], work_tree)
            return
        paths = self.run(["ls-files", "-z", "--", within], work_tree)
        self.run(["checkout-index", "-f", "-u", "-z", "--stdin"], work_tree, stdin=paths)

    def tree_bytes(self, tree: str, within: str = "") -> int:
        """The total size of the files in `tree` (under `within`), read from the object store writing nothing."""
        args = ["ls-tree", "-r", "-l", "-z", tree, "--", *([within] if within else [])]
        listing = self.run(args, self.git_dir)
        sizes = (entry.split(b"\t", 1)[0].split()[-1] for entry in listing.split(b"\0") if entry)
        return sum(int(size) for size in sizes if size.isdigit())

    def diff(self, old: str, new: str, *extra: str) -> bytes:
        """`git diff-tree` between two trees: a unified diff, or what `extra` asks for."""
        return self.run(self._diff_args(old, new, extra), self.git_dir)

    def diff_head(self, old: str, new: str, *extra: str, keep: int, read_at_most: int) -> Head:
        """`diff` read in bounded memory: its first `keep` bytes, its size counted up to `read_at_most`."""
        args = self._diff_args(old, new, extra)
        env = self.env(self.git_dir)
        return head(args, cwd=self.git_dir, env=env, keep=keep, read_at_most=read_at_most, own_config=True)

    @staticmethod
    def _diff_args(old: str, new: str, extra: Sequence[str]) -> list[str]:
        return ["diff-tree", "-r", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", *extra, old, new]

    def blob_sizes(self, blobs: Sequence[str]) -> dict[str, int]:
        """The size of each of `blobs` the store holds (the null id, a deleted file's, is not asked for)."""
        asked = [blob for blob in blobs if blob.strip("0")]
        if not asked:
            return {}
        query = ("\n".join(asked) + "\n").encode()
        answer = self.run(
            ["cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)"], self.git_dir, stdin=query
        )
        found = (line.split(" ") for line in answer.decode().splitlines())
        return {fields[0]: int(fields[2]) for fields in found if len(fields) == 3 and fields[1] == "blob"}

    def tree_of(self, commit: str) -> str:
        return self.run(["rev-parse", f"{commit}^{{tree}}"], self.git_dir).decode().strip()
