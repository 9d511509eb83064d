"""Provenance of work done in a workspace: where it started, what an agent CLI did, what a tool-using model called,
and what changed. Data only (conductor_mcp/agents/ produces them); a StepRecord can carry them as they are.

Every text here came from an agent or a tool and is bounded where it is made; none of it is ever run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from conductor_mcp.core.usage import CallUsage


class WorkspaceBase(BaseModel):
    """What a workspace started from, so its diff can be read, checked and applied against the same state."""

    id: str = Field(description="the workspace's id, unique on this server")
    kind: Literal["worktree", "copy"] = Field(description="a git worktree of the caller's repository, or a copy")
    source: str = Field(description="the caller's repository root (worktree) or directory (copy)")
    subdir: str = Field(default="", description="where in the source the agent works, relative ('' for the root)")
    scope: str = Field(
        default="",
        description="the part of the repository the workspace holds, relative ('' for all of it): the operator's "
        "root that holds the source, when that root lies inside the repository",
    )
    commit: str | None = Field(default=None, description="the repository's HEAD (worktree workspaces)")
    tree: str = Field(description="git tree id of the workspace's content at its start: the base of its diff")
    changes_digest: str | None = Field(
        default=None, description="sha256 of the caller's uncommitted changes applied over `commit` (None: clean)"
    )
    parent: str | None = Field(default=None, description="id of the workspace whose result this one started from")


class FileChange(BaseModel):
    path: str
    status: Literal["added", "modified", "deleted", "type-changed"]
    size: int | None = Field(default=None, description="bytes of the file after the change (None: deleted)")
    added: int | None = Field(default=None, description="lines added (None for a binary file)")
    removed: int | None = Field(default=None, description="lines removed (None for a binary file)")
    binary: bool = False


class WorkspaceDiff(BaseModel):
    """A workspace's change against its base: a unified diff (binary files named, not shown), cut to a size."""

    text: str = Field(description="unified diff; ends with a truncation marker when `truncated`")
    truncated: bool = False
    full_bytes: int = Field(
        default=0, description="size of the whole diff before it was cut (counted up to 16 MiB, then where it stopped)"
    )
    files: list[FileChange] = Field(default_factory=list)

    @property
    def added(self) -> int:
        return sum(change.added or 0 for change in self.files)

    @property
    def removed(self) -> int:
        return sum(change.removed or 0 for change in self.files)


class CommandRun(BaseModel):
    """A shell command an agent ran, as the CLI reported it."""

    command: str
    exit_code: int | None = Field(default=None, description="None when the CLI did not say (or it was refused)")
    output_tail: str | None = Field(default=None, description="the end of its output, bounded")


class AgentRecord(CallUsage):
    """One run of an agent CLI: how it was started, what it did and what it said. `latency_s` is its duration;
    tokens and cost are what the CLI reported (cost from the pool's price when the CLI reports tokens only)."""

    cli: str
    version: str | None = Field(default=None, description="what `<cli> --version` printed")
    command_line: str = Field(description="the argv it ran with, secrets masked (the prompt went on stdin)")
    exit_status: int | None = Field(default=None, description="None when it was killed")
    timed_out: bool = False
    final_message: str = ""
    commands: list[CommandRun] = Field(default_factory=list)
    cost_reported: bool = Field(default=False, description="the CLI reported the cost itself")
    stderr_tail: str | None = Field(default=None, description="the end of its stderr, kept when it failed")
    error: str | None = Field(default=None, description="why the run counts as failed, if it does")
    warning: str | None = Field(
        default=None,
        description="why its work may not have happened though it ended well: every command it ran failed, or it "
        "speaks of a change its workspace does not hold",
    )


class ToolUse(BaseModel):
    """One workspace tool call of a tool-using model and what it returned (bounded)."""

    turn: int
    name: str
    arguments: str = Field(description="JSON text, as the model wrote it (bounded)")
    output: str
    error: bool = False
    latency_s: float = 0.0


class StepWork(BaseModel):
    """What a step that worked in a workspace left (an agent CLI or a model with workspace tools). `diff` is its
    own change against its base, bounded (what people and later steps read); `patch` is the whole change from the
    caller's tree (`origin`) to the step's result, for `apply`: the steps it built on included, binary files too."""

    base: WorkspaceBase
    origin: WorkspaceBase | None = Field(
        default=None, description="the caller's tree the first workspace of the chain started from (None: `base`)"
    )
    agent: AgentRecord | None = None
    tool_uses: list[ToolUse] = Field(default_factory=list)
    diff: WorkspaceDiff | None = None
    patch: str | None = Field(default=None, description="git apply input from `origin` to the result (None: none)")
    patch_files: list[FileChange] = Field(default_factory=list, description="what `patch` changes")
    patch_note: str | None = Field(default=None, description="why there is no patch, when there is a change")

    @property
    def root(self) -> WorkspaceBase:
        """What `patch` applies to: the caller's tree as the chain found it."""
        return self.origin or self.base
