"""The trainer's scorer (learning/training.py's Scorer): every rollout it scores is a run the service stores, so its
store lives in a folder of the scorer's own, and closing the scorer removes it (runs left 30 MB folders behind)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.learning import decisions, subpools, train_options
from conductor_mcp.learning.training import Scorer
from conductor_mcp.service.catalogue import load_pool


def test_the_scorer_stores_its_runs_in_a_folder_it_removes_when_it_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp and TemporaryDirectory put folders
    args = train_options.parse_args(
        [
            *("--base-model", "m", "--pool", "sim-composed-v3", "--sim-set", "composed-v3", "--sim-tasks", "4"),
            *("--steps", "1", "--completion", "decisions", "--subpool-k", "4", "--permute-ids"),
            *("--out", str(tmp_path / "run")),
        ]
    )
    scorer = Scorer(args)
    try:
        (folder,) = tmp_path.glob("conductor-train-*")
        task = train_options.training_tasks(args)[0]
        pool = subpools.training_pool(args, load_pool("sim-composed-v3", [builtin_pool_dir()]), 0, task)
        (outcome,) = scorer([decisions.completion_workflow("model_0+ model_1", pool, task)], [task], [pool])
        assert outcome.well_formed and 0.0 <= outcome.reward <= 1.0
        assert any(path.stat().st_size > 0 for path in folder.rglob("*.sqlite3"))
    finally:
        scorer.close()
    assert not folder.exists() and not list(tmp_path.glob("conductor-train-*"))
