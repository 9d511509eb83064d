"""Structured JSON logs on stderr (stdout is the MCP wire), with secrets redacted as a last line of defence."""

from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any

import structlog
from structlog.typing import EventDict, Processor

from conductor_mcp.config import secret_values as environment_secrets

_KEY_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-]{8,}|AIza[0-9A-Za-z_\-]{20,}|Bearer\s+[A-Za-z0-9._\-]{8,})")
REDACTED = "[redacted]"


_registered: set[str] = set()


def register_secret(value: str) -> None:
    """Remember a key read for a call (from any variable or file) so that redaction masks it everywhere."""
    if len(value) >= 8:
        _registered.add(value)


def secret_values() -> list[str]:
    """Registered keys and values of environment variables whose names say they hold a secret."""
    return sorted(environment_secrets() | _registered, key=len, reverse=True)


def redact_values(text: str) -> str:
    """Mask the known secret values (a model's answer keeps key-shaped examples it writes on purpose)."""
    for value in secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact(text: str) -> str:
    """Mask known secret values and key-shaped strings in text bound for a log, an error or the store."""
    return _KEY_SHAPES.sub(REDACTED, redact_values(text))


def _redact_event(_: Any, __: str, event: EventDict) -> EventDict:
    return {k: redact(v) if isinstance(v, str) else v for k, v in event.items()}


class _JsonRedactingFormatter(logging.Formatter):
    """Third-party stdlib log records as JSON lines, redacted like our own."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"logger": record.name, "level": record.levelname.lower(), "event": redact(record.getMessage())}
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry)


class _CurrentStderr:
    """Whatever sys.stderr is when a line is written, not when logging was configured: a program that swaps
    stderr (a test runner capturing output, an embedding application) never leaves logs writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _level(level: str) -> int:
    numeric = logging.getLevelName(level.upper())
    return numeric if isinstance(numeric, int) else logging.INFO


def configure_logging(level: str = "info") -> None:
    """JSON lines to stderr for us and for the libraries we call (litellm, httpx, mcp)."""
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(_JsonRedactingFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(_level(level), logging.WARNING))  # third-party chatter stays quiet unless it matters
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):  # litellm installs plain-text handlers of its own
        library_logger = logging.getLogger(name)
        library_logger.handlers.clear()
        library_logger.propagate = True
        library_logger.setLevel(logging.WARNING)
    _configure_structlog(level)


def _configure_structlog(level: str) -> None:
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _redact_event,
        structlog.processors.JSONRenderer(),
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_level(level)),
        logger_factory=structlog.WriteLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,  # a configuration made later must still reach loggers already used
    )
    global _generation
    _generation += 1


_generation = 0  # bumped by each configuration of ours, so a Logger resolves again after one


class Logger:
    """A module's logger, resolved once per configuration: structlog's lazy proxy (uncached, so that a later
    configure_logging reaches loggers already used) builds a bound logger, its processors and a writer on every
    call, ~4.5 us, twice per step. structlog.testing.capture_logs swaps the processors inside the list a resolved
    logger holds, so captures still see every event."""

    __slots__ = ("_bound", "_generation", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._generation = -1
        self._bound: Any = None

    def __getattr__(self, method: str) -> Any:
        if self._generation != _generation:
            self._bound, self._generation = structlog.get_logger(self._name).bind(), _generation
        return getattr(self._bound, method)


def get_logger(name: str) -> Logger:
    return Logger(name)


if not structlog.is_configured():  # structlog's own default prints to stdout, which would corrupt the MCP wire
    _configure_structlog("info")
