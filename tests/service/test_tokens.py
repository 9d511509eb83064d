"""Named tokens (service/tokens.py) and the SDK TokenVerifier over them (doors/http/principals.py): changes made
by another process are seen at the next check, the admin token is the local user, and a broken tokens file admits
no named token while the admin token still works."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from conductor_mcp.core.principal import LOCAL, Principal
from conductor_mcp.doors.http.principals import ADMIN_SCOPE, LOCAL_IDENTITY, RUNS_SCOPE, Credentials
from conductor_mcp.errors import RequestError, SettingsError
from conductor_mcp.service.tokens import TokenBook

ADMIN = "the-admin-token-for-these-tests-0123456789"


async def test_tokens_verify_as_their_principal_until_revoked_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "state" / "tokens.json"
    server, cli = TokenBook(path), TokenBook(path)  # two processes' views of one file
    credentials = Credentials(ADMIN, server)
    alice, ops = cli.add("alice"), cli.add("ops", admin=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and alice not in path.read_text()
    assert credentials.principal_of(alice) == Principal("alice")
    assert credentials.principal_of(ops) == Principal("ops", admin=True)
    assert credentials.principal_of(ADMIN) == LOCAL and credentials.principal_of(alice + "x") is None
    assert credentials.principal_of("") is None and credentials.standing(LOCAL_IDENTITY) == LOCAL
    named = credentials.identify(alice)
    assert named is not None and named.token_id not in path.read_text() and named.token_id not in alice
    token = await credentials.verify_token(alice)
    assert token is not None and (token.client_id, token.scopes) == ("alice", [RUNS_SCOPE])
    assert (await credentials.verify_token(ops)).scopes == [ADMIN_SCOPE]  # type: ignore[union-attr]
    cli.revoke("alice")
    assert credentials.principal_of(alice) is None and credentials.standing(named) is None
    assert credentials.principal_of(ops) == Principal("ops", True)
    with pytest.raises(RequestError, match="no token named 'alice'"):
        cli.revoke("alice")
    cli.add("alice", admin=True)  # the same name again: a new token, not the one a session names
    assert credentials.standing(named) is None
    assert Credentials(None, server).standing(LOCAL_IDENTITY) is None  # no admin token: no local sessions


def test_a_broken_tokens_file_admits_no_named_token_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    book = TokenBook(path)
    named = book.add("alice")
    path.write_text("{not json")
    with pytest.raises(SettingsError, match="is not a tokens file"):
        book.entries()
    credentials = Credentials(ADMIN, book)
    assert credentials.principal_of(named) is None and credentials.principal_of(ADMIN) == LOCAL
