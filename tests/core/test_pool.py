"""Pool files: the shipped pools load, and broken ones fail with errors naming file, worker and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.core.pool import mask_url, mask_values
from conductor_mcp.errors import PoolError
from conductor_mcp.service.catalogue import available_pools, load_pool
from tests.conftest import sim_pool_doc, write_pool

BUILTIN = [builtin_pool_dir()]


@pytest.mark.parametrize("name", ["sim", "frontier", "paper"])
def test_shipped_pools_load(name: str) -> None:
    pool = load_pool(name, BUILTIN)
    assert pool.name == name
    assert pool.default_worker in [w.id for w in pool.workers]


def test_paper_pool_has_the_papers_seven_workers() -> None:
    pool = load_pool("paper", BUILTIN)
    assert len(pool.workers) == 7
    models = " ".join(w.model for w in pool.workers)
    for name in (
        "gemini-2.5-pro",
        "claude-sonnet-4",
        "gpt-5",
        "DeepSeek-R1-Distill-Qwen-32B",
        "gemma-3-27b-it",
        "Qwen3-32B",
    ):
        assert name in models
    open_weights = [w for w in pool.workers if w.model.startswith("hosted_vllm/")]
    assert len(open_weights) == 4 and all(w.api_base for w in open_weights)
    assert pool.visible_ids() == [f"model_{i}" for i in range(7)]


def test_anonymised_and_named_ids(pool_dir: Path) -> None:
    write_pool(pool_dir, sim_pool_doc(name="named", anonymize=False))
    named = load_pool("named", [pool_dir])
    assert named.visible_ids() == ["alpha", "beta", "gamma"]
    anon = load_pool("sim", BUILTIN)
    assert anon.resolve("model_0").id == anon.workers[0].id
    with pytest.raises(PoolError, match="no worker 'model_9'"):
        anon.resolve("model_9")


def test_sample_is_seeded_and_keeps_fallbacks_consistent() -> None:
    pool = load_pool("paper", BUILTIN)
    a, b, c = pool.sample(3, seed=7), pool.sample(3, seed=7), pool.sample(3, seed=8)
    assert [w.id for w in a.workers] == [w.id for w in b.workers]
    assert len(a.workers) == 3 and a.default_worker in [w.id for w in a.workers]
    assert a.name != c.name and "seed=7" in a.name
    subsets = {frozenset(w.id for w in pool.sample(3, seed=seed).workers) for seed in range(10)}
    assert len(subsets) > 1  # the seed decides the sub-pool
    for worker in a.workers:
        assert set(worker.fallbacks) <= {w.id for w in a.workers}
    with pytest.raises(PoolError, match="between 1 and 7"):
        pool.sample(8, seed=1)


def test_digest_changes_with_content(pool_dir: Path) -> None:
    write_pool(pool_dir, sim_pool_doc(name="p1"))
    write_pool(pool_dir, sim_pool_doc(name="p1b", max_steps=3))
    assert load_pool("p1", [pool_dir]).digest() == load_pool("p1", [pool_dir]).digest()
    assert load_pool("p1", [pool_dir]).digest() != load_pool("p1b", [pool_dir]).digest()


def _broken(pool_dir: Path, name: str, mutate) -> str:
    doc = sim_pool_doc(name=name)
    mutate(doc)
    path = write_pool(pool_dir, doc)
    with pytest.raises(PoolError) as err:
        load_pool(name, [pool_dir])
    message = str(err.value)
    assert str(path) in message
    return message


def test_missing_field_names_file_worker_and_field(pool_dir: Path) -> None:
    message = _broken(pool_dir, "nodesc", lambda d: d["workers"][1].pop("description"))
    assert "worker 'beta'" in message and "'description'" in message


def test_bad_type_and_unknown_field(pool_dir: Path) -> None:
    message = _broken(pool_dir, "badtype", lambda d: d["workers"][0].update(timeout_s="soon", colour="red"))
    assert "worker 'alpha' field 'timeout_s'" in message and "worker 'alpha' field 'colour'" in message


def test_negative_price(pool_dir: Path) -> None:
    message = _broken(
        pool_dir, "price", lambda d: d["workers"][2].update(price={"input_per_mtok": -1, "output_per_mtok": 1})
    )
    assert "worker 'gamma' field 'price.input_per_mtok'" in message


def test_duplicate_ids_unknown_default_and_bad_fallback(pool_dir: Path) -> None:
    assert "duplicate worker ids: ['alpha']" in _broken(pool_dir, "dup", lambda d: d["workers"][1].update(id="alpha"))
    assert "default_worker 'zeta'" in _broken(pool_dir, "dflt", lambda d: d.update(default_worker="zeta"))
    assert "fallback 'alpha' must be another worker" in _broken(
        pool_dir, "fb", lambda d: d["workers"][0].update(fallbacks=["alpha"])
    )


def test_reserved_params_and_bad_ids(pool_dir: Path) -> None:
    assert "params may not set ['api_key']" in _broken(
        pool_dir, "reserved", lambda d: d["workers"][0].update(params={"api_key": "x"})
    )
    assert "worker 'has space' field 'id'" in _broken(
        pool_dir, "badid", lambda d: d["workers"][0].update(id="has space")
    )


def test_conductor_and_simulation_errors(pool_dir: Path) -> None:
    assert "field 'conductor.structured_output'" in _broken(
        pool_dir, "so", lambda d: d["conductor"].update(structured_output="xml")
    )
    assert "simulation.workers.alpha.default_skill" in _broken(
        pool_dir, "skill", lambda d: d["simulation"]["workers"]["alpha"].update(default_skill=2)
    )


def test_not_a_mapping_and_bad_yaml(pool_dir: Path) -> None:
    (pool_dir / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(PoolError, match="must be a mapping"):
        load_pool("list", [pool_dir])
    (pool_dir / "yamlerr.yaml").write_text("workers: [\n")
    with pytest.raises(PoolError, match="cannot read pool file"):
        load_pool("yamlerr", [pool_dir])


def test_unknown_pool_lists_available_and_paths_work(pool_dir: Path) -> None:
    with pytest.raises(PoolError, match=r"unknown pool 'nope'; available pools: .*sim"):
        load_pool("nope", BUILTIN)
    path = write_pool(pool_dir, sim_pool_doc(name="bypath"))
    assert load_pool(str(path), []).name == "bypath"
    with pytest.raises(PoolError, match="does not exist"):
        load_pool(str(pool_dir / "missing.yaml"), [])


def test_user_pools_shadow_builtin(pool_dir: Path) -> None:
    write_pool(pool_dir, sim_pool_doc(name="sim"))
    assert available_pools([pool_dir, *BUILTIN])["sim"].parent == pool_dir


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://user:pass@host.example/v1", "https://***@host.example/v1"),
        ("https://token@host.example:9/p", "https://***@host.example:9/p"),
        ("https://h.example/v1?key=abc&x", "https://h.example/v1?key=***&***"),
        ("http://[::1]:8080/v1#secret", "http://[::1]:8080/v1#***"),
    ],
)
def test_mask_url_keeps_where_and_hides_credentials(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_public_view_masks_every_model_and_leaves_the_pool_alone(pool_dir: Path) -> None:
    doc = sim_pool_doc(name="views")
    doc["workers"][0]["params"] = {"extra_headers": {"X-Api-Key": "k-123"}, "max_tokens": 10}
    pool = load_pool(str(write_pool(pool_dir, doc)), [])
    view = pool.public_view()
    assert view["workers"][0]["params"] == {"extra_headers": {"X-Api-Key": "***"}, "max_tokens": 10}
    assert pool.workers[0].params["extra_headers"] == {"X-Api-Key": "k-123"}  # the running pool keeps its values
    assert mask_values({"a": [1, "s", None, True]}) == {"a": [1, "***", None, True]}


# ------------------------------------------------------------------------------ agents and tool-using workers


def test_the_agents_pool_loads_with_agents_beside_model_workers() -> None:
    pool = load_pool("agents", BUILTIN)
    by_id = {w.id: w for w in pool.workers}
    assert [w.id for w in pool.agent_workers()] == ["codex", "codex-investigator", "claude-code"]
    codex, claude, reviewer = by_id["codex"], by_id["claude-code"], by_id["gpt-5-reviewer"]
    assert codex.model == "agent/codex" and codex.agent and codex.agent.env_pass == ["OPENAI_API_KEY"]
    assert (codex.sandbox, by_id["codex-investigator"].sandbox) == ("workspace-write", "read-only")
    assert claude.model == "agent/claude" and claude.agent and claude.agent.model == "sonnet"
    assert reviewer.tools == ["read", "search", "run"] and reviewer.agent is None and reviewer.needs_workspace()
    assert not by_id["gpt-5"].needs_workspace()
    view = pool.public_view()["workers"][0]["agent"]
    assert view["args"] == ["***"] * 4 and view["env_pass"] == ["OPENAI_API_KEY"]  # names shown, values hidden


def test_an_agent_worker_defaults_to_an_agents_deadline(pool_dir: Path) -> None:
    doc = sim_pool_doc(name="agentdefaults")
    doc["workers"].append({"id": "cmd", "description": "a program", "agent": {"cli": "command", "command": ["x"]}})
    worker = load_pool(str(write_pool(pool_dir, doc)), []).get("cmd")
    assert (worker.timeout_s, worker.sandbox, worker.model) == (900.0, "read-only", "agent/command")


def test_pools_without_agents_keep_the_digests_their_runs_and_cards_recorded() -> None:
    card = json.loads((Path(__file__).parents[2] / "tools/results/conductor-cpu-sim-structured/card.json").read_text())
    assert load_pool("sim-structured", BUILTIN).digest() == card["pool_digest"]


def _agent(**fields: object) -> dict[str, object]:
    return {"id": "agentx", "description": "an agent", "agent": {"cli": "codex"}, **fields}


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        (_agent(model="openai/gpt-5"), "an agent worker runs a CLI, not a litellm model: remove 'model'"),
        (_agent(api_base="http://x/v1", params={"a": 1}), "['api_base', 'params'] do not apply to an agent worker"),
        (_agent(tools=["read"]), "['tools'] do not apply to an agent worker"),
        (_agent(agent={"cli": "gemini"}), "field 'agent.cli': Input should be 'codex', 'claude' or 'command'"),
        (_agent(agent={"cli": "command"}), "a command agent needs 'command'"),
        (_agent(agent={"cli": "command", "command": ["x"], "model": "m"}), "takes its program from 'command'"),
        (_agent(agent={"cli": "codex", "command": ["x"]}), "'command' is for command agents"),
        (_agent(agent={"cli": "codex", "env_pass": ["PATH"]}), "PATH is set by the server for every agent"),
        (_agent(agent={"cli": "codex", "env_pass": ["NOT-A-NAME"]}), "'NOT-A-NAME' is not an environment variable"),
        (_agent(agent={"cli": "codex", "env_pass": ["K"], "env": {"K": "v"}}), "both passed from the server"),
        (_agent(agent={"cli": "codex", "colour": "red"}), "field 'agent.colour': Extra inputs are not permitted"),
        (_agent(sandbox="anything-goes"), "field 'sandbox': Input should be 'read-only' or 'workspace-write'"),
    ],
)
def test_agent_worker_errors_name_the_worker_and_what_is_wrong(pool_dir: Path, worker: dict, message: str) -> None:
    name = f"bad{abs(hash(message)) % 10_000}"
    found = _broken(pool_dir, name, lambda d: d["workers"].append(worker))
    assert "worker 'agentx'" in found and message in found, found


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tools": ["read", "read"]}, "each tool once"),
        ({"tools": ["write"]}, "field 'tools.0': Input should be 'read', 'search' or 'run'"),
        ({"tools": ["read"], "prompt_style": "completion"}, "a completion-style (base) model cannot call tools"),
        ({"tools": ["read"], "sandbox": "workspace-write"}, "'sandbox' applies to agent workers and to the 'run'"),
        ({"max_tool_turns": 3}, "'max_tool_turns' applies to a worker with tools"),
        ({"tools": ["run"], "max_tool_turns": 1}, "field 'max_tool_turns': Input should be greater than or equal to 2"),
    ],
)
def test_tool_worker_errors_name_the_worker_and_what_is_wrong(pool_dir: Path, fields: dict, message: str) -> None:
    found = _broken(pool_dir, f"tools{abs(hash(message)) % 10_000}", lambda d: d["workers"][0].update(fields))
    assert "worker 'alpha'" in found and message in found, found
