"""What a training run keeps between sessions (learning/resume.py): finished phases, the checkpoint to resume from,
the reward calls of the steps it has done; and a folder of another run is refused rather than mixed in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_mcp.errors import ConductorError
from conductor_mcp.learning import resume, train_options


def options(out: Path, *extra: str) -> list[str]:
    return ["--base-model", "m", "--sim-tasks", "8", "--steps", "3", "--out", str(out), *extra]


def test_finished_phases_are_kept_for_the_next_session_and_other_options_refused(tmp_path: Path) -> None:
    progress = resume.Progress(train_options.parse_args(options(tmp_path)))
    assert not progress.done("sft")
    progress.record("sft", {"result": [1.5, 0.5], "wall_s": 3.0})
    again = resume.Progress(train_options.parse_args(options(tmp_path, "--session-minutes", "30")))
    assert again.done("sft") and again["sft"]["result"] == [1.5, 0.5] and not again.done("grpo")
    assert not (tmp_path / "progress.json.new").exists()
    with pytest.raises(ConductorError, match=r"holds a run with other options \(lr, steps\)"):
        resume.Progress(train_options.parse_args(options(tmp_path, "--steps", "4", "--lr", "1e-4")))


def test_a_session_ends_only_once_its_time_is_up() -> None:
    resume.Session(0).check("sft")  # no --session-minutes: never ends
    resume.Session(60).check("sft")
    with pytest.raises(resume.SessionEnded, match="after GRPO step 1 of 2; run the same command again"):
        resume.Session(1e-9).check("GRPO step 1 of 2")


def test_the_newest_complete_checkpoint_is_resumed(tmp_path: Path) -> None:
    assert resume.last_checkpoint(tmp_path / "trainer") == (None, 0)
    for step, complete in ((1, True), (2, True), (10, False)):  # 10: killed while it was written
        folder = tmp_path / "trainer" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    (tmp_path / "trainer" / "checkpoint-x").mkdir()
    assert resume.last_checkpoint(tmp_path / "trainer") == (tmp_path / "trainer" / "checkpoint-2", 2)


def test_reward_calls_past_the_checkpoint_are_dropped(tmp_path: Path) -> None:
    calls = [{"mean": 0.1 * i, "rollouts": {"groups": i}} for i in range(4)]
    (tmp_path / resume.REWARDS).write_text("".join(json.dumps(c) + "\n" for c in calls))
    assert resume.reward_log(tmp_path, 2) == calls[:2]
    assert resume.reward_log(tmp_path, 3) == calls[:2]  # the dropped call is gone from the file too
    assert resume.reward_log(tmp_path, 0) == [] and (tmp_path / resume.REWARDS).read_text() == ""
