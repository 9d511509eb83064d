"""A host's MCP config file edited in place: JSON (Claude Code, Claude Desktop, Cursor, VS Code) or TOML (Codex,
through tomlkit, so its comments and layout survive). Everything but the one entry is kept as it was read, and
the file is replaced in one step (a host reading it meanwhile sees the old file or the new one, never half).

A project's config lives in a repository someone else may have written, so nothing is read or written through a
symbolic link: a linked config file, or a linked folder between the project and it, is refused (it could point at
the user's own config, or copy it into the clone), and the new text goes to a temporary file made afresh beside
the target (O_EXCL|O_NOFOLLOW, an unpredictable name), never one a clone could have planted. A file that does not
parse, or whose server table is not a table of server entries, is an error naming the file and what is wrong.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from tomlkit.items import InlineTable, Table

from conductor_mcp.errors import RequestError

NEW_FILE_MODE = 0o600  # other servers' entries in these files may hold keys


def _is_toml(path: Path) -> bool:
    return path.suffix == ".toml"


def _linked(path: Path) -> RequestError:
    return RequestError(
        f"{path}: is a symbolic link (to {os.readlink(path)}); conductor-mcp writes no host config through a link: "
        "pass --config with the file it should write"
    )


def check_links(path: Path, root: Path) -> None:
    """Refuse `path` if it, or a folder between `root` and it, is a symbolic link (`root` itself may be one)."""
    for place in [path, *path.parents]:
        if place == root or root not in place.parents:
            return
        if place.is_symlink():
            raise _linked(place)


def _read(path: Path) -> str:
    """The file's text ("" when it does not exist yet), read without following a link."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _linked(path) from None
        raise RequestError(f"{path}: cannot read it: {exc.strerror}") from None
    with os.fdopen(handle, "rb") as file:
        data = file.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(
            f"{path}: not UTF-8 text (byte {exc.start}): fix it, or add the entry by hand (--dry-run)"
        ) from None


def load(path: Path, table: str) -> Any:
    """The parsed file (an empty document when it does not exist yet); a file that cannot be parsed, or whose
    `table` is not a table of server entries, is an error naming it, since rewriting it would lose what it holds."""
    text = _read(path)
    if _is_toml(path):
        try:
            document: Any = tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise RequestError(
                f"{path}: not valid TOML ({exc}); fix it, or add the entry by hand (--dry-run)"
            ) from None
    else:
        try:
            document = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise RequestError(
                f"{path}: not plain JSON ({exc.msg} at line {exc.lineno}; comments?): add the entry by hand (--dry-run)"
            ) from None
        except RecursionError:
            raise RequestError(f"{path}: JSON nested too deeply to read: add the entry by hand (--dry-run)") from None
        if not isinstance(document, dict):
            raise RequestError(f"{path}: holds {_kind(document)}, not a JSON object")
    servers = document.get(table, {})
    if not isinstance(servers, dict):
        raise RequestError(f"{path}: {table!r} is {_kind(servers)}, not a table of servers")
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise RequestError(f"{path}: server {name!r} in {table!r} is {_kind(entry)}, not a table")
    return document


def _kind(value: Any) -> str:
    """What a parsed value is, in the file's own terms (tomlkit's values subclass these types)."""
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "a list"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), f"a {type(value).__name__}")


def entry_of(document: Any, table: str, name: str) -> dict[str, Any] | None:
    """The entry `name` in the (loaded) document's server table, as plain data, or None."""
    entry = document.get(table, {}).get(name)
    return entry.unwrap() if isinstance(entry, Table | InlineTable) else entry


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
        if isinstance(servers, InlineTable):  # `mcp_servers = { ... }`: an inline table holds inline tables only
            inline = tomlkit.inline_table()
            inline.update(entry)
            servers.add(name, inline)
        else:
            servers.add(name, _toml_entry(entry))
        return tomlkit.dumps(document)
    document.setdefault(table, {})[name] = entry
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def snippet(path: Path, table: str, name: str, entry: dict[str, Any]) -> str:
    """The entry alone, as it would appear in the file (what --dry-run prints)."""
    return with_entry(tomlkit.document() if _is_toml(path) else {}, path, table, name, entry)


def write(path: Path, text: str) -> None:
    """Replace the file's text in one rename, keeping its mode (new files are 0600); a link there is refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    else:
        if stat.S_ISLNK(info.st_mode):
            raise _linked(path)
        mode = stat.S_IMODE(info.st_mode)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".conductor-mcp.tmp", dir=path.parent)
    temporary = Path(name)  # made with O_EXCL|O_NOFOLLOW under a random name: nothing planted is written through
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), mode)
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
