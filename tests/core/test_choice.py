"""The caller's choice of workers: one narrowing, clear errors, fallbacks kept inside the choice."""

from __future__ import annotations

import pytest

from conductor_mcp.core.choice import WorkerChoice, allowed_ids, pool_view
from conductor_mcp.core.pool import parse_pool
from conductor_mcp.core.prompts import system_prompt
from conductor_mcp.errors import RequestError
from tests.conftest import sim_pool_doc


def pool_with_host():
    doc = sim_pool_doc()
    doc["workers"][0]["fallbacks"] = ["beta", "gamma"]
    doc["workers"].append({"id": "host", "model": "host", "description": "the host's own model"})
    return parse_pool(doc, "test", "testpool")


def test_no_choice_keeps_the_pool_as_it_is() -> None:
    pool = pool_with_host()
    assert allowed_ids(pool, None, host_offered=True) is None
    assert pool_view(pool, None) is pool


def test_only_and_exclude_narrow_in_pool_order_and_fallbacks_stay_inside() -> None:
    pool = pool_with_host()
    ids = allowed_ids(pool, WorkerChoice(only=("gamma", "alpha", "beta"), exclude=("beta",)), host_offered=True)
    assert ids == ["alpha", "gamma"]
    view = pool_view(pool, ids)
    assert [w.id for w in view.workers] == ["alpha", "gamma"] and view.name == pool.name
    assert view.get("alpha").fallbacks == ["gamma"]  # beta, excluded, is no fallback any more
    assert view.visible_ids() == ["model_0", "model_1"]
    prompt = system_prompt(view, 3)
    assert "strongest at math" in prompt and "generalist" in prompt and "strongest at code" not in prompt
    assert pool.get("alpha").fallbacks == ["beta", "gamma"]  # the catalog's pool is untouched


def test_the_default_worker_moves_inside_the_choice() -> None:
    pool = pool_with_host()
    view = pool_view(pool, allowed_ids(pool, WorkerChoice(exclude=("alpha",)), host_offered=False))
    assert view.default_worker == "beta" and [w.id for w in view.workers] == ["beta", "gamma"]


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        (WorkerChoice(only=("alpha", "delta")), "workers.only: 'delta' not in pool 'testpool'; its workers are alpha"),
        (WorkerChoice(exclude=("nobody",)), "workers.exclude: 'nobody' not in pool 'testpool'"),
        (WorkerChoice(only=("alpha",), exclude=("alpha",)), "workers: only alpha; exclude alpha leaves no worker"),
        (WorkerChoice(only=()), "workers: only  leaves no worker of pool 'testpool'"),
    ],
)
def test_bad_choices_name_what_is_wrong(choice: WorkerChoice, message: str) -> None:
    with pytest.raises(RequestError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        allowed_ids(pool_with_host(), choice, host_offered=True)


def test_the_host_model_is_offered_only_to_a_client_that_answers_sampling() -> None:
    pool = pool_with_host()
    assert allowed_ids(pool, None, host_offered=False) == ["alpha", "beta", "gamma"]
    assert allowed_ids(pool, WorkerChoice(only=("host", "beta")), host_offered=False) == ["beta"]
    assert allowed_ids(pool, WorkerChoice(only=("host",)), host_offered=True) == ["host"]
    with pytest.raises(RequestError, match=r"only the host's model is left \(host\).*sampling"):
        allowed_ids(pool, WorkerChoice(only=("host",)), host_offered=False)


def test_a_recorded_choice_that_the_pool_no_longer_has_is_named() -> None:
    with pytest.raises(RequestError, match="no longer has delta"):
        pool_view(pool_with_host(), ["alpha", "delta"])


def test_choice_lists_are_bounded_and_closed() -> None:
    with pytest.raises(ValueError):
        WorkerChoice.model_validate({"only": ["a"] * 65})
    with pytest.raises(ValueError):
        WorkerChoice.model_validate({"include": ["a"]})
