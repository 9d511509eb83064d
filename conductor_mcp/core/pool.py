"""Pools: the workers a Conductor may call, and the Conductor itself, loaded from YAML files.

Every model is reached through litellm, so a worker is a litellm model string plus what the call needs
(api base, the *name* of the env var holding its key, generation params, prices, fallbacks). A worker may instead
be an agent CLI (`agent:`, run in its own workspace by conductor_mcp/agents/), or a model given workspace tools
(`tools:`). The pool file is validated as a whole, and errors name the file, the worker and the field.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from conductor_mcp.core.agent_spec import AgentCli, AgentSpec, SandboxMode, WorkspaceTool
from conductor_mcp.core.host_model import HOST_MODEL, HOST_ONLY_FIELDS, HostPreferences, check_host_worker
from conductor_mcp.core.limits import AGENT_TIMEOUT_S, MAX_DOCUMENT_DEPTH, MAX_DOCUMENT_VALUES, MAX_STEPS
from conductor_mcp.core.simulation import SimulationConfig, SimWorkerProfile
from conductor_mcp.errors import PoolError

MASK = "***"
WORKER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
CONDUCTOR_ID = "conductor"  # reserved: the conductor named as a worker (recursion)


class Pricing(BaseModel):
    """USD per million tokens, as providers publish them."""

    model_config = ConfigDict(extra="forbid")
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def per_token(self) -> tuple[float, float]:
        """USD per input and output token, as calls are priced."""
        return self.input_per_mtok / 1e6, self.output_per_mtok / 1e6


class ModelSpec(BaseModel):
    """How to reach one model through litellm."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, description="litellm model string, e.g. 'openai/gpt-5' or 'sim/solver'")
    api_base: str | None = None
    api_key_env: str | None = Field(default=None, description="name of the environment variable holding the key")
    api_key_file: str | None = Field(default=None, description="path of a file holding the key (read at call time)")
    max_concurrency: int | None = Field(default=None, ge=1, description="concurrent calls to this model's endpoint")
    params: dict[str, Any] = Field(default_factory=dict, description="generation params passed to litellm")
    price: Pricing | None = Field(default=None, description="overrides litellm's price map (needed for hosted_vllm/)")
    prompt_style: Literal["chat", "completion"] = Field(
        default="chat", description="'completion' flattens the messages into one prompt, for base models"
    )
    timeout_s: float = Field(default=120.0, gt=0, description="deadline of one attempt")
    max_retries: int = Field(
        default=2, ge=0, le=10, description="retries on rate limits, timeouts, 5xx, connection errors"
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> ModelSpec:
        if self.api_key_env and self.api_key_file:
            raise ValueError("give api_key_env or api_key_file, not both")
        return self

    @field_validator("params")
    @classmethod
    def _no_reserved_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = {"model", "messages", "api_key", "api_base", "metadata", "stream"} & set(value)
        if reserved:
            raise ValueError(f"params may not set {sorted(reserved)}: use the worker's own fields")
        return value


# Fields of a model worker that mean nothing for an agent worker (its CLI reaches its own model).
_WORKSPACE_FIELDS = (
    "agent",
    "tools",
    "sandbox",
    "max_tool_turns",
    *HOST_ONLY_FIELDS,
)  # added after pools were digested
# A sim profile's fields added after pools were digested: they count in the digest only where a pool sets them.
_LATER_PROFILE_FIELDS = ("review_skills", "difficulty_factors", "longer_when_harder")
_MODEL_ONLY = ("api_base", "api_key_env", "api_key_file", "params", "prompt_style", "max_retries", "max_concurrency")


class WorkerSpec(ModelSpec):
    id: str = Field(description="stable id used in pool files, transcripts and (when not anonymised) prompts")
    description: str = Field(min_length=1, description="strengths, shown to the conductor")
    fallbacks: list[str] = Field(default_factory=list, description="ids of workers to try when this one fails")
    agent: AgentSpec | None = Field(
        default=None, description="an agent CLI run in its own workspace instead of one model call"
    )
    tools: list[WorkspaceTool] = Field(
        default_factory=list, description="workspace tools offered to a tool-capable model: read, search, run"
    )
    sandbox: SandboxMode = Field(
        default="read-only",
        description="what an agent, or a model's `run` tool, may do to its workspace: 'read-only' or "
        "'workspace-write' (never the caller's tree, which it does not see)",
    )
    max_tool_turns: int = Field(
        default=12, ge=2, le=50, description="model calls of a tool-using worker; the last one must answer"
    )
    preferences: HostPreferences | None = Field(
        default=None, description="for `model: host`: hints sent to the host as MCP modelPreferences"
    )

    @model_validator(mode="before")
    @classmethod
    def _agent_model(cls, data: Any) -> Any:
        """An agent worker has no litellm model: its `model` names the CLI (transcripts show it), its deadline
        defaults to an agent's."""
        if not isinstance(data, dict) or data.get("agent") is None:
            return data
        if "model" in data:
            raise ValueError(
                "an agent worker runs a CLI, not a litellm model: remove 'model' "
                "(agent.model is the model the CLI should use)"
            )
        agent = data["agent"]
        cli = agent.get("cli") if isinstance(agent, dict) else None
        model = f"agent/{cli if cli in get_args(AgentCli) else 'unknown'}"
        return {**data, "model": model, "timeout_s": data.get("timeout_s", AGENT_TIMEOUT_S)}

    @model_validator(mode="after")
    def _workspace_fields(self) -> WorkerSpec:
        given = self.model_fields_set
        check_host_worker(self.model, given, self.params)
        if self.agent is not None:
            wrong = [name for name in (*_MODEL_ONLY, "tools", "max_tool_turns") if name in given]
            if wrong:
                raise ValueError(f"{wrong} do not apply to an agent worker: its CLI is configured under 'agent'")
            return self
        if len(set(self.tools)) != len(self.tools):
            raise ValueError(f"tools: each tool once, got {self.tools}")
        if self.tools and self.prompt_style == "completion":
            raise ValueError(
                "a completion-style (base) model cannot call tools: remove 'tools' or use prompt_style chat"
            )
        if "sandbox" in given and "run" not in self.tools:
            raise ValueError("'sandbox' applies to agent workers and to the 'run' tool; this worker has neither")
        if "max_tool_turns" in given and not self.tools:
            raise ValueError("'max_tool_turns' applies to a worker with tools")
        return self

    def is_host(self) -> bool:
        """Whether this worker is the host's own model (offered only to clients that answer sampling)."""
        return self.model == HOST_MODEL

    def needs_workspace(self) -> bool:
        """Whether each step of this worker runs in its own workspace (an agent, or a model with tools)."""
        return self.agent is not None or bool(self.tools)

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not WORKER_ID.match(value):
            raise ValueError("must start with a letter or digit and use only letters, digits, '_', '.', '-'")
        if value == CONDUCTOR_ID:
            raise ValueError(f"'{CONDUCTOR_ID}' is reserved for the conductor itself (set recursion: true)")
        return value


class ConductorSpec(ModelSpec):
    structured_output: Literal["json_schema", "json_object", "none"] = Field(
        default="json_schema",
        description="how the backend takes a JSON schema: vLLM/OpenAI 'json_schema', llama.cpp 'json_object'",
    )
    timeout_s: float = Field(default=180.0, gt=0)
    prompt: Literal["full", "compact"] = Field(
        default="full",
        description="'compact' condenses the rules and keeps one short example (about a third of the tokens), "
        "for small conductors trained on it: tools/train_conductor.py uses the pool's choice",
    )
    max_text_chars: int | None = Field(
        default=None, ge=20, description="caps reasoning and instructions in the schema, so small models cannot ramble"
    )


class Pool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    conductor: ConductorSpec
    workers: list[WorkerSpec] = Field(min_length=1)
    default_worker: str | None = Field(default=None, description="the worker a fallback one-step workflow uses")
    max_steps: int = Field(default=5, ge=1, le=MAX_STEPS)
    anonymize: bool = Field(default=True, description="show workers to the conductor as model_0..k, as the paper does")
    recursion: bool = Field(default=False, description="offer the conductor itself as a worker (recursive correction)")
    self_correct: bool = Field(default=False, description="always give the conductor one recursive look at the end")
    max_depth: int = Field(default=2, ge=0, le=5, description="deepest nesting of corrective workflows")
    simulation: SimulationConfig | None = Field(
        default=None, description="profiles of sim/ models (see core/simulation.py)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Pool:
        ids = [w.id for w in self.workers]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate worker ids: {duplicates}")
        if self.default_worker is None:
            self.default_worker = ids[0]
        elif self.default_worker not in ids:
            raise ValueError(f"default_worker {self.default_worker!r} is not a worker id; known: {ids}")
        for worker in self.workers:
            for fallback in worker.fallbacks:
                if fallback not in ids or fallback == worker.id:
                    raise ValueError(f"worker {worker.id!r}: fallback {fallback!r} must be another worker id")
        return self

    # -- what the conductor sees ------------------------------------------------------------------
    def visible_ids(self) -> list[str]:
        """The ids the conductor sees, in pool order."""
        if self.anonymize:
            return [f"model_{i}" for i in range(len(self.workers))]
        return [w.id for w in self.workers]

    def offered_ids(self) -> list[str]:
        """The worker ids the conductor may write: the visible ids, and itself when recursion is on."""
        return [*self.visible_ids(), CONDUCTOR_ID] if self.recursion else self.visible_ids()

    def resolve(self, visible_id: str) -> WorkerSpec:
        """The worker behind an id the conductor used (`model_0` when anonymised, else the pool's id)."""
        try:
            return self.workers[self.visible_ids().index(visible_id)]
        except ValueError:
            raise PoolError(f"pool {self.name!r} has no worker {visible_id!r}") from None

    def spec_of(self, visible_id: str) -> ModelSpec:
        """The model behind an id in a workflow: the conductor itself, or the worker the id resolves to."""
        return self.conductor if visible_id == CONDUCTOR_ID else self.resolve(visible_id)

    def get(self, worker_id: str) -> WorkerSpec:
        """The worker with this pool id (the id in pool files and transcripts)."""
        for worker in self.workers:
            if worker.id == worker_id:
                return worker
        raise PoolError(f"pool {self.name!r} has no worker {worker_id!r}")

    def visible_id_of(self, worker_id: str) -> str:
        """The id the conductor sees for the worker with this pool id."""
        return self.visible_ids()[[w.id for w in self.workers].index(worker_id)]

    def default_visible_id(self) -> str:
        """The id the conductor sees for the default worker (fallback workflows, baselines)."""
        return self.visible_id_of(self.default_worker or self.workers[0].id)

    def fallbacks_of(self, worker: WorkerSpec) -> list[WorkerSpec]:
        return [self.get(fallback) for fallback in worker.fallbacks]

    def specs(self) -> list[ModelSpec]:
        """Every model the pool calls: the conductor, then the workers."""
        return [self.conductor, *self.workers]

    def key_names(self) -> list[str]:
        """The environment variables the pool's models read their API keys from (names, never values)."""
        return sorted({spec.api_key_env for spec in self.specs() if spec.api_key_env})

    def digest(self) -> str:
        """Identifies the pool's content, so a stored run says exactly which pool it ran on. Fields added since
        runs were recorded count only where set (a worker's workspace fields, a sim profile's review skills and
        difficulty curve): pools that set none keep the digests their runs and cards recorded."""
        view = self.model_dump(mode="json")
        for worker in view["workers"]:
            for name in _WORKSPACE_FIELDS:
                if worker[name] == WorkerSpec.model_fields[name].get_default(call_default_factory=True):
                    del worker[name]
        for profile in (view.get("simulation") or {}).get("workers", {}).values():
            for name in _LATER_PROFILE_FIELDS:
                if profile.get(name) == SimWorkerProfile.model_fields[name].get_default(call_default_factory=True):
                    profile.pop(name, None)
        canonical = json.dumps(view, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def public_view(self) -> dict[str, Any]:
        """The pool as a client may see it: every model's `params` keep their names but hide their text (a header
        value may be a credential), and `api_base` keeps scheme, host, port and path but hides credentials; an
        agent's fixed environment values and extra arguments are hidden the same way."""
        view = self.model_dump(mode="json")
        for spec in (view["conductor"], *view["workers"]):
            spec["params"] = mask_values(spec["params"])
            if spec["api_base"]:
                spec["api_base"] = mask_url(spec["api_base"])
            if spec.get("agent"):
                spec["agent"]["env"] = mask_values(spec["agent"]["env"])
                spec["agent"]["args"] = mask_values(spec["agent"]["args"])
        return view

    def agent_workers(self) -> list[WorkerSpec]:
        """The workers that are agent CLIs."""
        return [w for w in self.workers if w.agent is not None]

    def only(self, worker_ids: list[str], name: str | None = None, given_order: bool = False) -> Pool:
        """The pool with just these workers (pool order kept, or theirs with `given_order`): fallbacks and the
        default worker stay inside them."""
        kept = set(worker_ids)
        chosen = [self.get(i) for i in worker_ids] if given_order else [w for w in self.workers if w.id in kept]
        workers = [w.model_copy(update={"fallbacks": [f for f in w.fallbacks if f in kept]}) for w in chosen]
        default = self.default_worker if self.default_worker in kept else workers[0].id
        return self.model_copy(update={"name": name or self.name, "workers": workers, "default_worker": default})

    def sample(self, k: int, seed: int | str, permute: bool = False) -> Pool:
        """A random k-of-n sub-pool, reproducible from the seed (the paper randomises pools in training). With
        `permute`, its workers come in random order, so an anonymised pool's `model_i` names a different worker
        from draw to draw and a conductor must read the descriptions to know who is who."""
        if not 1 <= k <= len(self.workers):
            raise PoolError(f"sub-pool size must be between 1 and {len(self.workers)}, got {k}")
        chosen = random.Random(seed).sample(range(len(self.workers)), k)
        name = f"{self.name}[k={k},seed={seed}{',permuted' if permute else ''}]"
        return self.only([self.workers[i].id for i in (chosen if permute else sorted(chosen))], name, permute)


def mask_values(value: Any) -> Any:
    """Text hidden at any depth, keys kept; numbers, booleans and nulls (temperatures, limits) stay."""
    if isinstance(value, dict):
        return {key: mask_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_values(item) for item in value]
    return MASK if isinstance(value, str) else value


def mask_url(url: str) -> str:
    """A URL with its user and password, query values and fragment hidden; scheme, host, port and path kept."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    items = [item.partition("=") for item in parts.query.split("&") if item]
    query = "&".join(f"{name}={MASK}" if equals else MASK for name, equals, _ in items)  # a bare item may be a key
    return urlunsplit((parts.scheme, netloc, parts.path, query, MASK if parts.fragment else ""))


# ---------------------------------------------------------------------------------------------- parsing


def parse_pool(raw: Any, source: str, default_name: str) -> Pool:
    """Validate a pool document; every error names the source, the worker and the field."""
    if not isinstance(raw, dict):
        raise PoolError(f"{source}: a pool file must be a mapping with 'conductor' and 'workers'")
    _check_size(raw, source)
    raw = {"name": default_name, **raw}
    try:
        pool = Pool.model_validate(raw)
    except ValidationError as exc:
        raise PoolError(f"{source}: " + "; ".join(_describe(err, raw) for err in exc.errors())) from None
    return pool


def _describe(err: Any, raw: dict[str, Any]) -> str:
    loc = list(err["loc"])
    msg = err["msg"]
    if len(loc) >= 2 and loc[0] == "workers" and isinstance(loc[1], int):
        workers = raw.get("workers") or []
        entry = workers[loc[1]] if loc[1] < len(workers) else None
        who = entry.get("id") if isinstance(entry, dict) and entry.get("id") else f"#{loc[1]}"
        field = ".".join(str(p) for p in loc[2:]) or "(entry)"
        return f"worker {who!r} field {field!r}: {msg}"
    field = ".".join(str(p) for p in loc) or "(pool)"
    if loc and loc[0] == "simulation":
        return f"{field}: {msg}"
    return f"field {field!r}: {msg}"


def _check_size(raw: Any, source: str) -> None:
    """Refuse a document too deep or too big to validate, without expanding it: YAML aliases can make a few
    lines stand for billions of values ("billion laughs"), which validation or hashing would then walk."""
    pending: list[tuple[Any, int]] = [(raw, 0)]
    count = 0
    while pending:
        value, depth = pending.pop()
        count += 1
        if count > MAX_DOCUMENT_VALUES:
            raise PoolError(
                f"{source}: more than {MAX_DOCUMENT_VALUES} values once YAML aliases are expanded; "
                "a pool file is a few dozen lines"
            )
        if depth > MAX_DOCUMENT_DEPTH:
            raise PoolError(f"{source}: nested deeper than {MAX_DOCUMENT_DEPTH} levels")
        if isinstance(value, dict):
            pending.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)
