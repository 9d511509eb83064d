"""A workspace's change as people and models read it: a unified diff in which binary files are named (never
dumped), cut at a line to a size with a marker that says how much was left out, and a list of changed files with
their sizes and line counts. Known secret values are masked in it: an agent that read a key may have written it to
a file. An agent's change may be larger than memory should hold: the diff is read only as far as it is kept, and
its size counted up to DIFF_SIZE_COUNTED_MAX."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from conductor_mcp.core.agent_records import FileChange, WorkspaceDiff
from conductor_mcp.core.limits import DIFF_SIZE_COUNTED_MAX
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
    counted = max(max_bytes, DIFF_SIZE_COUNTED_MAX)
    full = store.diff_head(old, new, "-p", keep=max_bytes, read_at_most=counted)
    if full.whole and full.size <= max_bytes:
        return WorkspaceDiff(
            text=redact_values(full.data.decode("utf-8", errors="replace")), full_bytes=full.size, files=files
        )
    added, removed = sum(f.added or 0 for f in files), sum(f.removed or 0 for f in files)
    size = f"{full.size}" if full.whole else f"over {counted}"
    marker = (
        f"\n[diff truncated: the first {{shown}} of {size} bytes are shown; {len(files)} files changed in all, "
        f"+{added} -{removed} lines]\n"
    )
    room = max(0, max_bytes - len(marker) - 20)
    cut = full.data[:room]
    if b"\n" in cut:
        cut = cut[: cut.rindex(b"\n") + 1]
    shown = redact_values(cut.decode("utf-8", errors="replace"))
    return WorkspaceDiff(text=shown + marker.format(shown=len(cut)), truncated=True, full_bytes=full.size, files=files)


def changed_files(store: Store, old: str, new: str) -> list[FileChange]:
    """Each changed path with its status, its size after the change and its line counts (None for binary files)."""
    raw = store.diff(old, new, "--raw", "--no-abbrev", "-z").split(b"\0")
    found: dict[str, tuple[Status, str]] = {}  # path -> (status, its blob after the change)
    for header, path in zip(raw[0::2], raw[1::2], strict=False):
        if path:
            _, _, _, blob, code = header.decode().split(" ")
            found[path.decode("utf-8", errors="replace")] = (_STATUS.get(code[:1], "modified"), blob)
    sizes = store.blob_sizes([blob for _, blob in found.values()])
    changes = []
    for record in store.diff(old, new, "--numstat", "-z").split(b"\0"):
        if not record:
            continue
        added, removed, raw_path = record.split(b"\t", 2)
        path = raw_path.decode("utf-8", errors="replace")
        status, blob = found.get(path, ("modified", ""))
        binary = added == b"-"
        changes.append(
            FileChange(
                path=path,
                status=status,
                size=sizes.get(blob),
                added=None if binary else int(added),
                removed=None if binary else int(removed),
                binary=binary,
            )
        )
    return changes
