"""What a training run has finished, so that the same command, run again after a session ended, resumes it.

A CPU run of the conductor (tools/train_conductor.py) takes longer than a session on a small machine. Each phase
(the held-out evaluations, the warm start, GRPO) records its result in OUT/progress.json once it is done, and a
phase found there is not done again; GRPO checkpoints into OUT/trainer every --save-steps steps and resumes from the
last checkpoint (TRL's Trainer restores the adapter, the optimizer, the scheduler, the RNG and the step). With
--session-minutes the run also ends by itself, checkpointed, after the phase or step that crosses that many minutes,
so nothing is lost to the session's end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from conductor_mcp.errors import ConductorError
from conductor_mcp.learning import card

PROGRESS = "progress.json"
REWARDS = "rewards.jsonl"
PER_SESSION = ("session_minutes", "gradient_checkpointing")  # may differ between sessions: same run, same result
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


class SessionEnded(ConductorError):
    """The run stopped at its --session-minutes with its progress kept: the same command resumes it."""


class Progress:
    """The phases of a run in OUT that are done, with their results, kept in OUT/progress.json."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.file = args.out / PROGRESS
        recipe = json.loads(json.dumps(card.recipe(args)))  # as it reads back from the file
        options = {k: v for k, v in recipe.items() if k not in PER_SESSION}
        kept = json.loads(self.file.read_text()) if self.file.exists() else {"options": options, "phases": {}}
        if kept["options"] != options:
            changed = sorted(
                k for k in options.keys() | kept["options"].keys() if options.get(k) != kept["options"].get(k)
            )
            raise ConductorError(
                f"{args.out} holds a run with other options ({', '.join(changed)}): resume it with its own command, "
                "or give another --out"
            )
        self.options, self.phases = options, dict(kept["phases"])

    def done(self, phase: str) -> bool:
        return phase in self.phases

    def __getitem__(self, phase: str) -> Any:
        return self.phases[phase]

    def record(self, phase: str, result: Any) -> None:
        """Keep a finished phase's result; written whole and renamed, so a kill never leaves half a file."""
        self.phases[phase] = result
        new = self.file.with_name(f"{PROGRESS}.new")
        new.write_text(json.dumps({"options": self.options, "phases": self.phases}, indent=1))
        os.replace(new, self.file)


class Session:
    """This process's share of a run: --session-minutes from its start (none: no end)."""

    def __init__(self, minutes: float) -> None:
        self.deadline = time.monotonic() + minutes * 60 if minutes else math.inf

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def check(self, after: str) -> None:
        """End the run here, resumable, if the session's time is up."""
        if self.over():
            raise SessionEnded(f"the session's time ran out after {after}; run the same command again to resume")


def last_checkpoint(trainer_dir: Path) -> tuple[Path | None, int]:
    """The GRPO checkpoint to resume from and its step: the newest complete one (the Trainer writes
    trainer_state.json last), or (None, 0)."""
    found = [
        (int(m[1]), path)
        for path in trainer_dir.glob("checkpoint-*")
        if (m := _CHECKPOINT.fullmatch(path.name)) and (path / "trainer_state.json").exists()
    ]
    if not found:
        return None, 0
    step, path = max(found)
    return path, step


def reward_log(out: Path, steps: int) -> list[dict[str, Any]]:
    """The reward calls kept in OUT/rewards.jsonl for the first `steps` GRPO steps (one call per step: a step's
    rollouts are generated once, training.grpo_config); calls of steps past the checkpoint are dropped, since
    resuming draws them again."""
    file = out / REWARDS
    lines = file.read_text().splitlines()[:steps] if steps and file.exists() else []
    file.write_text("".join(f"{line}\n" for line in lines))
    return [json.loads(line) for line in lines]
