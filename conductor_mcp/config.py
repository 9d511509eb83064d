"""Settings from the environment (and CLI flags): where state lives and where pools are found."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import platformdirs

from conductor_mcp.pool import builtin_pool_dir

MAX_STEPS_LIMIT = 20
MAX_TASK_CHARS = 100_000
MAX_CONTEXT_CHARS = 400_000
MAX_SEEN_OUTPUT_CHARS = 48_000  # a step's output is cut to this for the steps that see it (recorded)


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    pool_dirs: tuple[Path, ...]
    default_pool: str | None = None  # None: chosen by doctor.default_pool
    log_level: str = "info"
    step_timeout_s: float = 600.0
    server_max_tokens: int | None = None
    server_max_usd: float | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """CONDUCTOR_STATE_DIR, CONDUCTOR_POOL_PATH (os.pathsep-separated), CONDUCTOR_POOL, CONDUCTOR_LOG_LEVEL."""
        env = os.environ
        state_dir = Path(env.get("CONDUCTOR_STATE_DIR") or platformdirs.user_state_dir("conductor-mcp"))
        user_dirs = [Path(p).expanduser() for p in env.get("CONDUCTOR_POOL_PATH", "").split(os.pathsep) if p]
        settings = cls(
            state_dir=state_dir.expanduser(),
            pool_dirs=(*user_dirs, builtin_pool_dir()),
            default_pool=env.get("CONDUCTOR_POOL") or None,
            log_level=env.get("CONDUCTOR_LOG_LEVEL", "info").lower(),
            server_max_tokens=_number(env, "CONDUCTOR_SERVER_MAX_TOKENS", int),
            server_max_usd=_number(env, "CONDUCTOR_SERVER_MAX_USD", float),
        )
        return replace(settings, **{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]

    @property
    def db_path(self) -> Path:
        return self.state_dir / "runs.sqlite3"


def _number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> Any:
    value = env.get(name)
    if not value:
        return None
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(f"{name} must be a {kind.__name__}, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return number
