"""Who an HTTP request acts for, carried the MCP SDK's way.

`Credentials` is the SDK's `TokenVerifier`: the server's admin token (CONDUCTOR_HTTP_TOKEN, or the one it keeps
in its state directory) is the local user's, LOCAL; a named token (tokens.py) is its own principal. The bearer
middleware (doors/http/app.py) authenticates with the SDK's `BearerAuthBackend` over it and sets the SDK's auth
context, so every door reads the request's principal the same way, `current_principal()`, from the `AccessToken`
the SDK keeps for the request (tools, resources and Tasks methods included). A request with no access token is
served without auth (stdio, `--no-auth` on loopback): the local user's.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from conductor_mcp.core.principal import LOCAL, LOCAL_NAME, Principal
from conductor_mcp.errors import SettingsError
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.service.access import Access, Reads
from conductor_mcp.service.tokens import NamedToken, TokenBook

if TYPE_CHECKING:
    from conductor_mcp.service.access import Front, ReadFront

log = get_logger(__name__)

ADMIN_SCOPE = "conductor:admin"  # sees and acts on every run
RUNS_SCOPE = "conductor:runs"  # its own runs


ADMIN_TOKEN_ID = "server"  # the admin token's id: sessions are signed with a key made from it, so a new one ends them


@dataclass(frozen=True)
class Identity:
    """Who presented a token, and which token it was (its id, never the token): a viewer session or login code
    made from it lasts only while that very token stands."""

    principal: Principal
    token_id: str


LOCAL_IDENTITY = Identity(LOCAL, ADMIN_TOKEN_ID)


class Credentials:
    """The tokens this server accepts and the principal each one is (an SDK `TokenVerifier`)."""

    def __init__(self, admin_token: str | None, book: TokenBook | None = None) -> None:
        self._admin = admin_token.encode() if admin_token else None
        self.book = book

    def identify(self, token: str) -> Identity | None:
        """The principal a presented token is and the token's id, or None; every token is compared in constant
        time."""
        token = token.strip(" ")
        local = self._admin is not None and hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._admin)
        named = self._named(lambda book: book.find(token))
        if local:
            return LOCAL_IDENTITY
        return Identity(Principal(named.name, named.admin), named.id) if named is not None else None

    def principal_of(self, token: str) -> Principal | None:
        """The principal a presented token is, or None."""
        identity = self.identify(token)
        return identity.principal if identity is not None else None

    def standing(self, identity: Identity) -> Principal | None:
        """The principal `identity` names, as it is now, while the very token it names stands (not revoked, not
        replaced by a new token under the same name)."""
        if identity.principal.name == LOCAL_NAME:
            return LOCAL if self._admin is not None and identity.token_id == ADMIN_TOKEN_ID else None
        entry = self._named(lambda book: book.named(identity.principal.name))
        if entry is None or not hmac.compare_digest(entry.id, identity.token_id):
            return None
        return Principal(entry.name, entry.admin)

    def _named(self, look_up: Callable[[TokenBook], NamedToken | None]) -> NamedToken | None:
        if self.book is None:
            return None
        try:
            return look_up(self.book)
        except SettingsError as exc:  # a broken file admits no named token; the admin token still works
            log.error("tokens_file_unreadable", error=str(exc))
            return None

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = self.principal_of(token)
        return access_token(principal, token) if principal is not None else None


def access_token(principal: Principal, token: str = "") -> AccessToken:
    """The SDK's record of an authenticated principal (`client_id` is its name)."""
    return AccessToken(token=token, client_id=principal.name, scopes=[ADMIN_SCOPE if principal.admin else RUNS_SCOPE])


def signed_in_user(principal: Principal) -> AuthenticatedUser:
    """The SDK's user for a principal that signed in otherwise than with the header (a viewer session)."""
    return AuthenticatedUser(access_token(principal))


def presented_token() -> str | None:
    """The token the current request's Authorization header presented; None when a viewer session signed it in
    (its access token holds no token) or nobody is authenticated."""
    token = get_access_token()
    return token.token if token is not None and token.token else None


def current_principal() -> Principal:
    """The principal the current request acts for: its access token's, or the local user's when the server
    authenticates nobody (stdio, `--no-auth`)."""
    token = get_access_token()
    if token is None:
        return LOCAL
    return Principal(token.client_id, admin=ADMIN_SCOPE in token.scopes)


def access(service: Front) -> Access:
    """What the current request's principal may do with runs (conductor_mcp/service/access.py)."""
    return service.access(current_principal())


def reads(reader: ReadFront) -> Reads:
    """The runs the current request's principal may read."""
    return reader.reads(current_principal())
