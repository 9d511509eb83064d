"""A host's MCP config file edited in place: JSON (Claude Code, Claude Desktop, Cursor, VS Code) or TOML (Codex,
through tomlkit, so its comments and layout survive). Everything but the one entry is kept as it was read, and
the file is replaced in one step (a host reading it meanwhile sees the old file or the new one, never half)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from tomlkit.items import Table

from conductor_mcp.errors import RequestError

NEW_FILE_MODE = 0o600  # other servers' entries in these files may hold keys


def _is_toml(path: Path) -> bool:
    return path.suffix == ".toml"


def load(path: Path) -> Any:
    """The parsed file (an empty document when it does not exist yet); a file that cannot be parsed is an
    error naming it, since rewriting it would lose what it holds."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise RequestError(f"{path}: cannot read it: {exc.strerror}") from None
    if _is_toml(path):
        try:
            return tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise RequestError(
                f"{path}: not valid TOML ({exc}); fix it, or add the entry by hand (--dry-run)"
            ) from None
    try:
        document = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise RequestError(
            f"{path}: not plain JSON ({exc.msg} at line {exc.lineno}; comments?): add the entry by hand (--dry-run)"
        ) from None
    if not isinstance(document, dict):
        raise RequestError(f"{path}: holds a JSON {type(document).__name__}, not an object")
    return document


def entry_of(document: Any, table: str, name: str) -> dict[str, Any] | None:
    """The entry `name` in the document's server table, as plain data, or None."""
    servers = document.get(table)
    if servers is None:
        return None
    if not isinstance(servers, dict):
        raise RequestError(f"the config's {table!r} is not a table of servers")
    entry = servers.get(name)
    if entry is None:
        return None
    return entry.unwrap() if isinstance(entry, Table) else entry


def _toml_entry(entry: dict[str, Any]) -> Table:
    table = tomlkit.table()
    for key, value in entry.items():
        if isinstance(value, dict):
            inline = tomlkit.inline_table()
            inline.update(value)
            table.add(key, inline)
        else:
            table.add(key, value)
    return table


def with_entry(document: Any, path: Path, table: str, name: str, entry: dict[str, Any]) -> str:
    """The file's new text: `document` with `entry` as server `name` (added, or replacing the old one)."""
    if _is_toml(path):
        servers = document.get(table)
        if servers is None:
            servers = tomlkit.table(is_super_table=True)
            document.add(table, servers)
        if name in servers:
            del servers[name]
        servers.add(name, _toml_entry(entry))
        return tomlkit.dumps(document)
    document.setdefault(table, {})[name] = entry
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def snippet(path: Path, table: str, name: str, entry: dict[str, Any]) -> str:
    """The entry alone, as it would appear in the file (what --dry-run prints)."""
    return with_entry(tomlkit.document() if _is_toml(path) else {}, path, table, name, entry)


def write(path: Path, text: str) -> None:
    """Replace the file's text in one rename, keeping its mode (new files are 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    temporary = path.with_name(f".{path.name}.conductor-mcp.tmp")
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
