"""Named tokens: one principal per token (core/principal.py), kept hashed in a 0600 file in the state directory.

`conductor-mcp tokens add NAME [--admin]` makes a token and prints it once; the file keeps only its name, whether
it is an admin's, when it was made, and a keyed hash of it: HMAC-SHA256 under a random salt of its own. The tokens
are 256 random bits, so there is no dictionary to try and a slow password hash would only cost every request its
time. A presented token is checked against every entry in constant time, without stopping at a match.

Writes (add, revoke) hold a lock on a file beside it and replace the file atomically (a new 0600 file renamed
over the old), so a server reading it never sees half a file. A running server notices the change at the next
request (it compares the file's identity, size and time): a revoked token is refused from then on, and viewer
sessions signed in with it end. A session names the token it came from by the token's id (a digest of its entry,
never the token), so a token revoked and added again under the same name is a new token: the old sessions stay
ended.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conductor_mcp.core.principal import name_problem
from conductor_mcp.core.records import now
from conductor_mcp.errors import RequestError, SettingsError
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.runtime.private import open_private, private_dir, private_file

log = get_logger(__name__)

TOKEN_PREFIX = "cmcp_"  # recognisable by secret scanners; never part of what identifies a principal
FORMAT = 1


@dataclass(frozen=True)
class NamedToken:
    """One entry of the file: never the token itself."""

    name: str
    admin: bool
    created: str
    salt: str
    digest: str

    def matches(self, token: str) -> bool:
        expected = bytes.fromhex(self.digest)
        return hmac.compare_digest(_digest(bytes.fromhex(self.salt), token), expected)

    @property
    def id(self) -> str:
        """Names this token and no other (a new token under the same name has another id); tells nothing of it."""
        return hashlib.sha256(b"conductor-mcp token id\0" + bytes.fromhex(self.digest)).hexdigest()[:32]


def _digest(salt: bytes, token: str) -> bytes:
    return hmac.new(salt, token.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


class TokenBook:
    """The named tokens in one file; reads follow the file as other processes change it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._entries: dict[str, NamedToken] = {}

    # -- reading ----------------------------------------------------------------------------------
    def entries(self) -> list[NamedToken]:
        """Every named token, in the order they were made (the file as it is now)."""
        self._refresh()
        return list(self._entries.values())

    def find(self, token: str) -> NamedToken | None:
        """The entry of `token`, or None; every entry is compared, in constant time each."""
        found: NamedToken | None = None
        for entry in self.entries():
            if entry.matches(token) and found is None:
                found = entry
        return found

    def named(self, name: str) -> NamedToken | None:
        """The entry of the token named `name`, while that token is not revoked."""
        self._refresh()
        return self._entries.get(name)

    def _refresh(self) -> None:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            self._seen, self._entries = None, {}
            return
        seen = (info.st_ino, info.st_size, info.st_mtime_ns)
        if seen != self._seen:
            self._entries = {entry.name: entry for entry in self._load()}
            self._seen = seen

    def _load(self) -> list[NamedToken]:
        private_file(self.path)  # an existing file is only chmod-ed (tightened, with a warning, if wider)
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8") or "{}")
            return [NamedToken(**entry) for entry in doc.get("tokens", [])]
        except (ValueError, TypeError, AttributeError) as exc:
            raise SettingsError(
                f"{self.path} is not a tokens file ({type(exc).__name__}: {exc}): move it aside and add the "
                "tokens again with `conductor-mcp tokens add`"
            ) from None

    # -- changing ---------------------------------------------------------------------------------
    def add(self, name: str, admin: bool = False) -> str:
        """Make a token for a new principal `name`; returns the token, which is kept nowhere in the clear."""
        problem = name_problem(name)
        if problem:
            raise RequestError(f"name: {problem}")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        with self._locked() as entries:
            if any(entry.name == name for entry in entries):
                raise RequestError(f"name: a token named {name!r} exists; revoke it first to make a new one")
            entries.append(NamedToken(name, admin, now(), salt.hex(), _digest(salt, token).hex()))
        log.info("token_added", name=name, admin=admin)
        return token

    def revoke(self, name: str) -> None:
        """Remove the token named `name`: it is refused from the next request on."""
        with self._locked() as entries:
            kept = [entry for entry in entries if entry.name != name]
            if len(kept) == len(entries):
                raise RequestError(f"name: no token named {name!r}")
            entries[:] = kept
        log.info("token_revoked", name=name)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[NamedToken]]:
        """The entries to change, under the lock; written back atomically when the block ends without error."""
        private_dir(self.path.parent)
        lock = self.path.with_name(f".{self.path.name}.lock")
        with open_private(lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            entries = self._load() if self.path.exists() else []
            yield entries
            self._write(entries)

    def _write(self, entries: list[NamedToken]) -> None:
        doc: dict[str, Any] = {"format": FORMAT, "tokens": [asdict(entry) for entry in entries]}
        draft = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        try:
            with open_private(draft, "x") as handle:
                handle.write(json.dumps(doc, indent=2) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(draft, self.path)
        finally:
            draft.unlink(missing_ok=True)
