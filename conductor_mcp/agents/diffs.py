"""A workspace's change as people and models read it: a unified diff in which binary files are named (never
dumped), cut at a line to a size with a marker that says how much was left out, and a list of changed files with
their line counts. Known secret values are masked in it: an agent that read a key may have written it to a file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from conductor_mcp.core.agent_records import FileChange, WorkspaceDiff
from conductor_mcp.runtime.logs import redact_values

if TYPE_CHECKING:
    from conductor_mcp.agents.git import Store

Status = Literal["added", "modified", "deleted", "type-changed"]
_STATUS: dict[str, Status] = {
    "A": "added",
    "M": "modified",
    "D": "deleted",
    "T": "type-changed",
}


def bounded_diff(store: Store, old: str, new: str, max_bytes: int) -> WorkspaceDiff:
    """The diff from tree `old` to tree `new`, its text at most `max_bytes` (marker included)."""
    if old == new:
        return WorkspaceDiff(text="")
    files = changed_files(store, old, new)
    full = store.diff(old, new, "-p")
    if len(full) <= max_bytes:
        return WorkspaceDiff(
            text=redact_values(full.decode("utf-8", errors="replace")), full_bytes=len(full), files=files
        )
    added, removed = sum(f.added or 0 for f in files), sum(f.removed or 0 for f in files)
    marker = (
        f"\n[diff truncated: the first {{shown}} of {len(full)} bytes are shown; {len(files)} files changed in all, "
        f"+{added} -{removed} lines]\n"
    )
    room = max(0, max_bytes - len(marker) - 20)
    cut = full[:room]
    if b"\n" in cut:
        cut = cut[: cut.rindex(b"\n") + 1]
    shown = redact_values(cut.decode("utf-8", errors="replace"))
    return WorkspaceDiff(text=shown + marker.format(shown=len(cut)), truncated=True, full_bytes=len(full), files=files)


def changed_files(store: Store, old: str, new: str) -> list[FileChange]:
    """Each changed path with its status and line counts (None for binary files)."""
    statuses = store.diff(old, new, "--name-status", "-z").split(b"\0")
    status_of: dict[str, Status] = {
        path.decode("utf-8", errors="replace"): _STATUS.get(code.decode()[:1], "modified")
        for code, path in zip(statuses[0::2], statuses[1::2], strict=False)
        if path
    }
    changes = []
    for record in store.diff(old, new, "--numstat", "-z").split(b"\0"):
        if not record:
            continue
        added, removed, raw_path = record.split(b"\t", 2)
        path = raw_path.decode("utf-8", errors="replace")
        binary = added == b"-"
        changes.append(
            FileChange(
                path=path,
                status=status_of.get(path, "modified"),
                added=None if binary else int(added),
                removed=None if binary else int(removed),
                binary=binary,
            )
        )
    return changes
