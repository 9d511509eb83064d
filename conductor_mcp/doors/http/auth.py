"""The bearer token's two weak points, guarded: a token too short or too plain to stand off loopback, and
guessing it by trying many.

Strength: a token shorter than MIN_TOKEN_CHARS, or of fewer than MIN_DISTINCT_CHARS different characters, is
refused for a server reachable from other machines and warned about on loopback (where any local account can
try it, but only from this machine). The token the server makes itself (`secrets.token_urlsafe(32)`) passes.

Guessing: a client address that presented AUTH_MAX_FAILURES wrong tokens within AUTH_WINDOW_S is refused (429, with
Retry-After) until the oldest of them is AUTH_WINDOW_S old, whatever it sends meanwhile, the right token included:
otherwise the refusal would tell a guesser nothing. A legitimate client sharing that address (on loopback, every
local process) is locked out with it for at most AUTH_WINDOW_S.
"""

from __future__ import annotations

import collections
import math
import time

from conductor_mcp.core.limits import (
    AUTH_MAX_FAILURES,
    AUTH_MAX_TRACKED,
    AUTH_WINDOW_S,
    MIN_DISTINCT_CHARS,
    MIN_TOKEN_CHARS,
)
from conductor_mcp.errors import RequestError
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def token_weakness(token: str) -> str | None:
    """Why a token is too weak to guard a server (None: it is not)."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"it has {len(token)} characters, fewer than {MIN_TOKEN_CHARS}"
    if len(set(token)) < MIN_DISTINCT_CHARS:
        return f"it uses {len(set(token))} different characters, fewer than {MIN_DISTINCT_CHARS}"
    return None


def check_token(token: str, loopback: bool) -> None:
    """Refuse a weak token for a server others can reach; warn about one on loopback."""
    weakness = token_weakness(token)
    if weakness is None:
        return
    if not loopback:
        raise RequestError(
            f"CONDUCTOR_HTTP_TOKEN is too weak to serve beyond this machine ({weakness}): set a random one "
            f"({MAKE_ONE}), or unset it and the server makes one"
        )
    log.warning("http_token_weak", problem=weakness, advice=f"any local account may guess it; {MAKE_ONE}")


class AuthThrottle:
    """Failed sign-ins per client address over a sliding window (see the module's docstring)."""

    def __init__(self, max_failures: int = AUTH_MAX_FAILURES, window_s: float = AUTH_WINDOW_S) -> None:
        self.max_failures, self.window_s = max_failures, window_s
        self._failures: dict[str, collections.deque[float]] = {}

    def retry_after(self, client: str) -> int | None:
        """Seconds until `client` may try again, or None when it may now."""
        failures = self._recent(client)
        if failures is None or len(failures) < self.max_failures:
            return None
        return max(1, math.ceil(failures[0] + self.window_s - time.monotonic()))

    def failed(self, client: str) -> None:
        failures = self._recent(client)
        if failures is None:
            if len(self._failures) >= AUTH_MAX_TRACKED:
                self._forget_quietest()
            failures = self._failures[client] = collections.deque()
        failures.append(time.monotonic())
        if len(failures) == self.max_failures:
            log.warning("http_auth_throttled", client=client, failures=len(failures), window_s=self.window_s)

    def _recent(self, client: str) -> collections.deque[float] | None:
        failures = self._failures.get(client)
        if failures is not None:
            while failures and failures[0] <= time.monotonic() - self.window_s:
                failures.popleft()
            if not failures:
                del self._failures[client]
                return None
        return failures

    def _forget_quietest(self) -> None:
        quietest = sorted(self._failures, key=lambda c: self._failures[c][-1])[: AUTH_MAX_TRACKED // 10]
        for client in quietest:
            del self._failures[client]
