"""The viewer's sign-in sessions: a random id per login, an expiry, revocable, in a signed cookie.

A session is `<id>.<principal>.<token id>.<expiry>.<mac>`: 128 random bits, the name of the principal that signed
in (core/principal.py: the viewer shows it that principal's runs only), the id of the token it signed in with
(doors/http/principals.py: a digest, never the token), the Unix time it ends (SESSION_TTL_S after the login), and an
HMAC of all four under a key derived from the server's admin token. So every replica and restart that shares the
token accepts it (no session table to share), and changing the token ends every session; revoking or replacing
the named token a session signed in with ends it too (doors/viewer/routes.py asks the token file on each request).
Signing out revokes the id in this process (until it would have expired anyway); other replicas keep accepting
it until then, which docs/use/viewer.md says.

Cookies are not scoped by port: any server on the same host name (another local account's listener on another
loopback port, say) receives the cookie when the browser visits it, and can replay it here until it expires or
is revoked. Over HTTPS (directly or behind a proxy that says so) the cookie is `__Host-conductor_viewer`:
Secure, Path=/, no Domain, so it never travels over plain HTTP and no sibling host name can set or shadow it.
Over plain HTTP, where browsers do not reliably keep a Secure cookie from 127.0.0.1, it is `conductor_viewer`
with Path=/ui/; both are HttpOnly and SameSite=Strict.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from typing import NamedTuple

from starlette.responses import Response

from conductor_mcp.core.limits import SESSION_TTL_S
from conductor_mcp.core.principal import Principal
from conductor_mcp.doors.http.principals import Identity

COOKIE = "conductor_viewer"
SECURE_COOKIE = "__Host-conductor_viewer"


class Session(NamedTuple):
    """A valid session's parts: the principal's admin flag is not among them (it is read at each request)."""

    id: str
    identity: Identity
    expiry: int


class Sessions:
    """Issues and checks signed session values; keeps the ids revoked here until they expire."""

    def __init__(self, token: str, ttl_s: float = SESSION_TTL_S) -> None:
        self._key = hmac.new(token.encode(), b"conductor-mcp viewer session key", hashlib.sha256).digest()
        self.ttl_s = ttl_s
        self._revoked: dict[str, float] = {}  # id -> when it would have expired

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()

    def issue(self, identity: Identity) -> str:
        expiry = math.ceil(time.time() + self.ttl_s)
        body = f"{secrets.token_urlsafe(16)}.{identity.principal.name}.{identity.token_id}.{expiry}"
        return f"{body}.{self._mac(body)}"

    def check(self, value: str) -> Session | None:
        """The session `value` is when this server issued it, unexpired and not revoked."""
        body, _, mac = value.rpartition(".")
        parts = body.split(".")
        if len(parts) != 4 or not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        session_id, principal, token_id, expiry = parts
        if not (session_id and principal and token_id and expiry.isdigit()):
            return None
        if int(expiry) <= time.time() or session_id in self._revoked:
            return None
        return Session(session_id, Identity(Principal(principal), token_id), int(expiry))

    def revoke(self, session: Session) -> None:
        now = time.time()
        self._revoked = {i: until for i, until in self._revoked.items() if until > now}
        self._revoked[session.id] = session.expiry

    def find(self, cookie_header: str) -> Session | None:
        """The first valid session among a Cookie header's viewer cookies."""
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name in (COOKIE, SECURE_COOKIE) and (session := self.check(value)) is not None:
                return session
        return None

    def set_cookie(self, response: Response, value: str, https: bool) -> None:
        if https:
            response.set_cookie(
                SECURE_COOKIE, value, max_age=int(self.ttl_s), path="/", secure=True, httponly=True, samesite="strict"
            )
        else:
            response.set_cookie(COOKIE, value, max_age=int(self.ttl_s), path="/ui/", httponly=True, samesite="strict")

    @staticmethod
    def clear_cookies(response: Response) -> None:
        response.delete_cookie(COOKIE, path="/ui/", httponly=True, samesite="strict")
        response.delete_cookie(SECURE_COOKIE, path="/", secure=True, httponly=True, samesite="strict")
