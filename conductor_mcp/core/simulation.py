"""The simulator's settings, as a pool file declares them: each sim worker's skills and speed, each sim conductor's
habits, and the time scale. Data only: models/sim.py serves the models, and each call carries its pool's settings,
so one pool's settings never change another's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, field_validator

DIFFICULTY = {"easy": (0.5, 0.5), "medium": (1.0, 1.0), "hard": (2.0, 0.75), "expert": (2.5, 0.55)}  # (tokens, skill)


class SimWorkerProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skills: dict[str, float] = Field(default_factory=dict, description="probability of a right answer per domain")
    default_skill: float = Field(default=0.5, ge=0, le=1)
    first_token_s: float = Field(default=0.3, ge=0)
    tokens_per_s: float = Field(default=80.0, gt=0)
    output_tokens: int = Field(default=300, ge=1, description="typical completion length on a medium task")
    difficulty_adjusted: bool = Field(
        default=True, description="easy tasks raise the skill and hard ones lower it; false keeps it exact (testbeds)"
    )
    difficulty_factors: dict[str, NonNegativeFloat] = Field(
        default_factory=dict,
        description="the skill's factor per difficulty, in place of the default adjustment (a testbed's own curve)",
    )
    longer_when_harder: bool = Field(
        default=True, description="harder tasks get longer answers (more tokens, more cost); false: the same length"
    )
    focus_bonus: float = Field(
        default=0.0, ge=0, le=1, description="added to the skill when the instruction names the task's pitfall"
    )
    review_skill: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="set: a worker shown answers keeps the right one with this chance, and fixes nothing it is not "
        "shown (models/sim_testbed.py); unset: an unsure worker adopts the majority it sees",
    )
    review_skills: dict[str, float] = Field(
        default_factory=dict, description="review skill per domain (a specialist checks its own domain best)"
    )

    @field_validator("difficulty_factors")
    @classmethod
    def _known_difficulties(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(DIFFICULTY))
        if unknown:
            raise ValueError(f"unknown difficulties {unknown}: the tasks' difficulties are {list(DIFFICULTY)}")
        return value

    def skill(self, domain: str) -> float:
        return min(1.0, max(0.0, self.skills.get(domain, self.default_skill)))

    def skill_at(self, domain: str, difficulty: str) -> float:
        """The chance of a right answer on a task of this domain and difficulty."""
        skill = self.skill(domain)
        if not self.difficulty_adjusted:
            return skill
        if self.difficulty_factors:
            return min(1.0, skill * self.difficulty_factors.get(difficulty, 1.0))
        if difficulty == "easy":
            return skill + (1 - skill) * 0.5
        return skill * DIFFICULTY.get(difficulty, DIFFICULTY["medium"])[1]


class SimConductorProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    malformed_rate: float = Field(default=0.0, ge=0, le=1)
    recursion_rate: float = Field(default=0.0, ge=0, le=1, description="how often a hard workflow ends with itself")
    always_recurse: bool = Field(default=False, description="names itself every time: a conductor that never stops")
    style: Literal["plausible", "testbed"] = Field(
        default="plausible", description="testbed: the scripted workflows of the structured testbed (sim_testbed.py)"
    )
    first_token_s: float = Field(default=0.2, ge=0)
    tokens_per_s: float = Field(default=120.0, gt=0)


class SimulationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    time_scale: float = Field(
        default=1.0, ge=0, description="multiplies every latency; CONDUCTOR_SIM_TIME_SCALE overrides"
    )
    workers: dict[str, SimWorkerProfile] = Field(default_factory=dict)
    conductors: dict[str, SimConductorProfile] = Field(default_factory=dict)
