"""Who asks: the principal a request acts for, and which runs it may see.

Every run records the principal that started it. A principal sees, continues and cancels its own runs only; an
admin sees every run. The local user (stdio, the CLI, `view`, and the holder of CONDUCTOR_HTTP_TOKEN or the
server's own token file) is the admin principal LOCAL, which also owns every run stored before runs had owners.
Named tokens (tokens.py) add principals of their own, named by the operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOCAL_NAME = "local"
# A name travels in signed viewer cookies (`.`-separated) and in the runs table: short, plain, lower case.
PRINCIPAL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Principal:
    """A principal: its name (what runs record) and whether it sees every run."""

    name: str
    admin: bool = False

    def sees(self, owner: str) -> bool:
        """Whether a run recorded as `owner`'s is visible to this principal."""
        return self.admin or owner == self.name


LOCAL = Principal(LOCAL_NAME, admin=True)


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a token's principal (None: it can)."""
    if not PRINCIPAL_NAME.match(name):
        return f"{name[:40]!r} is not 1-32 of a-z, 0-9, '_' and '-', starting with a letter or digit"
    if name == LOCAL_NAME:
        return f"{LOCAL_NAME!r} is the local user's (CONDUCTOR_HTTP_TOKEN, stdio, the CLI)"
    return None
