"""Settings: every `CONDUCTOR_*` variable is read here, once, into a typed, frozen object.

Components receive the settings (or the part they need) as arguments; nothing else reads `os.environ` for a
setting and nothing writes it to pass one along. The one other reading of the environment is also here:
the values of the variables a pool names for its API keys (`environment_value`) and the values that look
like secrets, so logs can mask them (`secret_values`).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Any

import platformdirs
from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from conductor_mcp.core.limits import DEFAULT_DISK_BUDGET_BYTES, DEFAULT_MAX_AGENTS
from conductor_mcp.errors import SettingsError

PACKAGE_DIR = Path(__file__).parent
_URL_PASSWORD = re.compile(r"(://[^:/@]+):[^@]*@")
_SECRET_NAME = re.compile(r"(API_KEY|_TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)


def builtin_pool_dir() -> Path:
    """pool_configs/ ships inside the wheel as conductor_mcp/pool_configs, and sits at the repo root in a checkout."""
    packaged = PACKAGE_DIR / "pool_configs"
    return packaged if packaged.is_dir() else PACKAGE_DIR.parent / "pool_configs"


def _user_state_dir() -> Path:
    """The user's state directory (platformdirs), e.g. `~/.local/state/conductor-mcp` on Linux."""
    return Path(platformdirs.user_state_dir("conductor-mcp"))


class Settings(BaseSettings):
    """The server's settings. Environment variables are `CONDUCTOR_<FIELD>`; CLI flags override them."""

    model_config = SettingsConfigDict(env_prefix="CONDUCTOR_", frozen=True, extra="ignore")

    state_dir: Path = Field(
        default_factory=_user_state_dir,
        description="where runs, leases and local model servers' state live",
    )
    pool_path: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(), description="extra pool directories, os.pathsep-separated; searched before the built-in pools"
    )
    roots: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(), description="directories `files` may be read from (a client's roots only narrow them); unset: cwd"
    )
    pool: str | None = Field(default=None, description="the default pool; unset: the first pool whose keys are all set")
    log_level: str = Field(
        default="info", description="log level on stderr; unset, the CLI logs at warning but for serve"
    )
    step_timeout_s: float = Field(default=600.0, gt=0, description="deadline of one step, retries included")
    server_max_tokens: int | None = Field(default=None, gt=0, description="tokens this process may spend on all runs")
    server_max_usd: float | None = Field(default=None, gt=0, description="USD this process may spend on all runs")
    http_token: str | None = Field(default=None, description="bearer token the HTTP server requires", repr=False)
    heartbeat_s: float = Field(
        default=10.0,
        gt=0,
        validation_alias=AliasChoices("conductor_heartbeat_s", "conductor_openai_keepalive_s", "heartbeat_s"),
        description="seconds without news after which a waiting client hears a heartbeat (MCP progress, an SSE "
        "keep-alive comment on the OpenAI door, a viewer event); CONDUCTOR_OPENAI_KEEPALIVE_S is its old name",
    )
    http_header_timeout_s: float = Field(
        default=10.0, gt=0, description="HTTP: seconds a client has to send a request's headers (slow or half-open)"
    )
    http_max_connections: int | None = Field(
        default=None, gt=0, description="HTTP: most connections open at once; unset: 1000, at most half the fd limit"
    )
    retry_base_s: float = Field(default=0.5, ge=0, description="first step of the jittered exponential retry backoff")
    task_poll_ms: int = Field(default=2000, ge=50, description="pollIntervalMs a Tasks client is asked to keep")
    sim_time_scale: float | None = Field(default=None, ge=0, description="overrides every sim pool's time_scale")
    database_url: str | None = Field(
        default=None,
        description="postgresql://... : keep runs in PostgreSQL, shared by several server replicas; unset: SQLite "
        "in state_dir",
        repr=False,
    )
    sim_call_log: Path | None = Field(default=None, description="the simulator appends each answered call here (tests)")
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="serve Prometheus /metrics on this loopback port too, without auth"
    )
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("otel_exporter_otlp_endpoint", "otlp_endpoint"),
        description="OTEL_EXPORTER_OTLP_ENDPOINT: send every run's trace there (OTLP over HTTP/protobuf; /v1/traces "
        "is appended); unset: no traces",
    )
    otlp_traces_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("otel_exporter_otlp_traces_endpoint", "otlp_traces_endpoint"),
        description="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: the full URL for traces, used as given (wins over the above)",
    )
    otlp_headers: str | None = Field(
        default=None,
        validation_alias=AliasChoices("otel_exporter_otlp_headers", "otlp_headers"),
        description="OTEL_EXPORTER_OTLP_HEADERS: key=value pairs, comma-separated, sent with each export",
        repr=False,
    )
    otel_service_name: str = Field(
        default="conductor-mcp",
        validation_alias=AliasChoices("otel_service_name"),
        description="OTEL_SERVICE_NAME: the service.name of the traces",
    )
    trace_content: bool = Field(
        default=False,
        description="put prompts and answers in trace spans (gen_ai.input.messages / output.messages); off: only "
        "models, tokens, finish reasons and timings",
    )
    workspace_dir: Path | None = Field(
        default=None, description="where agent workspaces live (outside /tmp for Codex); unset: state_dir/workspaces"
    )
    max_agents: int = Field(
        default=DEFAULT_MAX_AGENTS, ge=1, description="agent and tool-using steps running at once, in all runs"
    )
    workspace_disk_gib: float = Field(
        default=DEFAULT_DISK_BUDGET_BYTES / 2**30, gt=0, description="disk all workspaces may take together, GiB"
    )
    patch_max_mib: float = Field(
        default=4.0, gt=0, description="the largest patch a run keeps for `apply`, MiB; a larger change is summarised"
    )

    @field_validator("pool_path", "roots", mode="before")
    @classmethod
    def _split_path(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(Path(p).expanduser() for p in value.split(os.pathsep) if p)
        return value

    @field_validator("state_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("pool", "http_token", "database_url", "otlp_endpoint", "otlp_traces_endpoint", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return value or None

    @field_validator("database_url", mode="after")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL (unset it to keep runs in SQLite under the state dir)")
        return value

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """The environment's settings with the non-None overrides (CLI flags) applied.

        A value that does not parse raises SettingsError naming the variable.
        """
        try:
            return cls(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as exc:
            named = [(str(e["loc"][0]).upper().removeprefix("CONDUCTOR_"), e) for e in exc.errors()]  # alias or field
            problems = [f"CONDUCTOR_{name}: {e['msg']} (got {_shown(e.get('input'))!r})" for name, e in named]
            raise SettingsError("; ".join(problems)) from None

    @property
    def pool_dirs(self) -> tuple[Path, ...]:
        """The pool search path: the user's directories first (they may shadow a built-in pool)."""
        return (*self.pool_path, builtin_pool_dir())

    @property
    def file_roots(self) -> list[Path]:
        """Where `files` may be read from: a client's declared roots can only narrow these (context_files.py)."""
        return list(self.roots) or [Path.cwd()]

    @property
    def workspace_root(self) -> Path:
        return (self.workspace_dir or self.state_dir / "workspaces").expanduser()

    @property
    def db_path(self) -> Path:
        return self.state_dir / "runs.sqlite3"

    @property
    def http_token_file(self) -> Path:
        """Where `serve --http` keeps the token it made when CONDUCTOR_HTTP_TOKEN is unset (0600)."""
        return self.state_dir / "http-token"

    @property
    def tokens_file(self) -> Path:
        """The named tokens (`conductor-mcp tokens`), hashed, 0600 (conductor_mcp/service/tokens.py)."""
        return self.state_dir / "tokens.json"

    def with_pool_dirs_first(self, *directories: Path) -> Settings:
        """These settings with more pool directories searched first (tests, embedding applications)."""
        return self.model_copy(update={"pool_path": (*directories, *self.pool_path)})


def masked_url(url: str) -> str:
    """A URL fit for a message or a log: its password replaced."""
    return _URL_PASSWORD.sub(r"\1:***@", url)


def _shown(value: Any) -> Any:
    """A rejected value as an error may show it: a URL's password masked."""
    return masked_url(value) if isinstance(value, str) else value


def environment_value(name: str) -> str | None:
    """The value of an environment variable a pool names (an API key), read when it is needed."""
    return os.environ.get(name) or None


def proxy_configured() -> bool:
    """Whether the environment names an HTTP proxy (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, in either case), which
    model calls then honour, NO_PROXY included."""
    return any(
        value and name.lower() in ("http_proxy", "https_proxy", "all_proxy") for name, value in os.environ.items()
    )


def child_environment(**extra: str) -> dict[str, str]:
    """The environment for a child process we start (a model server): ours, plus `extra`."""
    return {**os.environ, **extra}


@functools.lru_cache(maxsize=4096)
def _names_a_secret(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


_seen_environment: dict[Any, Any] = {}
_seen_secrets: set[str] = set()


def secret_values() -> set[str]:
    """Values of environment variables whose names say they hold a secret, for log redaction.

    Read afresh whenever the environment changed since the last call (a key set later is masked too). Every model's
    answer is redacted with this: decoding every variable cost 0.12 ms a call (a run makes ~4.5), comparing the raw
    environment with its copy from the last call costs a microsecond; the test of each name is remembered too."""
    raw = getattr(os.environ, "_data", None)  # CPython's undecoded dict behind os.environ
    if raw is None or raw != _seen_environment:
        _seen_secrets.clear()
        _seen_secrets.update(v for k, v in os.environ.items() if len(v) >= 8 and _names_a_secret(k))
        _seen_environment.clear()
        _seen_environment.update(raw or {})
    return set(_seen_secrets)
