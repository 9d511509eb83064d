"""The viewer's run list as pages: keyset cursors both ways (older, newer) and the total the filters match."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conductor_mcp.errors import RequestError
from conductor_mcp.service.access import Reads


@dataclass(frozen=True)
class ListPage:
    """One page of runs, newest first, with the cursors of the pages beside it (None: no such page)."""

    rows: list[dict[str, Any]]
    older: str | None
    newer: str | None
    total: int


def cursor(row: dict[str, Any]) -> str:
    return f"{row['created_at']}~{row['id']}"


def _parse(filters: dict[str, str], name: str) -> tuple[str, str] | None:
    if name not in filters:
        return None
    created, sep, run_id = filters[name].partition("~")
    if not sep:
        raise RequestError(
            f"{name}: must be CREATED_AT~RUN_ID, as the '{'older' if name == 'before' else 'newer'}' link gives it"
        )
    return created, run_id


def list_page(reader: Reads, filters: dict[str, str], size: int) -> ListPage:
    """The page `filters` ask for: `before` (older than a row), `after` (newer than a row), else the newest."""
    before, after = _parse(filters, "before"), _parse(filters, "after")
    if before is not None and after is not None:
        raise RequestError("before, after: give one cursor, not both")
    status, pool = filters.get("status"), filters.get("pool")
    rows = reader.list_runs(size + 1, status, pool=pool, before=before, after=after)
    if after is not None:  # the size + 1 rows just above the cursor, newest first: one more means newer pages
        page, more_older, more_newer = rows[-size:], True, len(rows) > size
    else:
        page, more_older, more_newer = rows[:size], len(rows) > size, before is not None
    return ListPage(
        rows=page,
        older=cursor(page[-1]) if page and more_older else None,
        newer=cursor(page[0]) if page and more_newer else None,
        total=reader.count_runs(status, pool=pool),
    )
