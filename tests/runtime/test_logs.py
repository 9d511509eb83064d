"""Module loggers: resolved once per configuration, and still reached by a configuration made after first use."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from conductor_mcp.runtime.logs import configure_logging, get_logger


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    configure_logging("info")


def test_a_logger_is_resolved_once_not_on_every_call() -> None:
    """structlog's uncached proxy built a bound logger and a writer on every call (~4.5 us each, twice a step)."""
    configure_logging("info")
    made: list[Any] = []
    out = io.StringIO()

    def factory(*_: Any) -> structlog.PrintLogger:
        made.append(structlog.PrintLogger(out))
        return made[-1]

    structlog.configure(logger_factory=factory)
    log = get_logger("tests.logs")
    for i in range(3):
        log.info("step_finished", step=i)
    assert [json.loads(line)["step"] for line in out.getvalue().splitlines()] == [0, 1, 2]
    assert len(made) == 1


def test_a_later_configuration_reaches_a_logger_already_used(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    log = get_logger("tests.logs")
    log.debug("hidden")
    configure_logging("debug")
    log.debug("shown", n=1)
    configure_logging("warning")
    log.info("hidden_again")
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()]
    assert events == ["shown"]
