"""The conductor's output parser and validator: both formats, repairs, named errors, and fuzzing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conductor_mcp.core.workflow import parse_workflow, validate_workflow, workflow_json_schema
from conductor_mcp.errors import WorkflowError

IDS = ["model_0", "model_1", "model_2"]


def check(text: str, max_steps: int = 5):
    return validate_workflow(parse_workflow(text), IDS, max_steps)


def test_json_form_parses_exactly() -> None:
    text = json.dumps(
        {
            "reasoning": "r",
            "steps": [
                {"worker": "model_0", "instruction": "solve", "access": []},
                {"worker": "model_2", "instruction": "check", "access": "all"},
            ],
        }
    )
    workflow, repairs = check(text)
    assert repairs == []
    assert [(s.worker, s.instruction, s.access) for s in workflow.steps] == [
        ("model_0", "solve", []),
        ("model_2", "check", [0]),
    ]
    assert workflow.reasoning == "r"


def test_json_inside_prose_and_fences() -> None:
    workflow = '{"reasoning": "x", "steps": [{"worker": "model_1", "instruction": "go", "access": []}]}'
    text = f"Sure! Here it is:\n```json\n{workflow}\n```\nDone."
    workflow, _ = check(text)
    assert workflow.steps[0].worker == "model_1"


def test_paper_lists_python_literals_after_free_text() -> None:
    text = (
        "I will first have model 1 solve it, then model 0 verify.\n"
        "model_id = [1, 0]\n"
        "subtasks = ['Solve the [hard] problem', \"Verify step 0's answer\"]\n"
        "access_list = [[], 'all']\n"
    )
    parsed = parse_workflow(text)
    assert parsed.form == "lists"
    assert parsed.reasoning.startswith("I will first")
    workflow, repairs = validate_workflow(parsed, IDS, 5)
    assert [s.worker for s in workflow.steps] == ["model_1", "model_0"]
    assert workflow.steps[0].instruction == "Solve the [hard] problem"
    assert workflow.steps[1].access == [0]
    assert any("not an exact id" in r.fault for r in repairs)


def test_paper_lists_as_json_object() -> None:
    text = json.dumps({"model_id": ["model_2"], "subtasks": ["answer"], "access_list": [[]]})
    workflow, _ = check(text)
    assert workflow.steps[0].worker == "model_2"


def test_schema_names_workers_and_limits_steps() -> None:
    schema = workflow_json_schema(IDS, 4)
    assert schema["properties"]["steps"]["maxItems"] == 4
    assert schema["properties"]["steps"]["items"]["properties"]["worker"]["enum"] == IDS
    assert schema["required"] == ["reasoning", "steps"]


def _steps(*steps):
    return json.dumps(
        {"reasoning": "", "steps": [dict(zip(("worker", "instruction", "access"), s, strict=True)) for s in steps]}
    )


# Each case: conductor output -> expected fault text in a repair (repairable) or in the error (unrepairable).
REPAIRABLE = {
    "forward access": (_steps(("model_0", "a", [1]), ("model_1", "b", [0])), "does not point to an earlier step"),
    "self access": (_steps(("model_0", "a", [0])), "does not point to an earlier step"),
    "negative access": (_steps(("model_0", "a", []), ("model_1", "b", [-1])), "does not point"),
    "huge access": (_steps(("model_0", "a", []), ("model_1", "b", [10**30])), "does not point"),
    "access int": (_steps(("model_0", "a", []), ("model_1", "b", 0)), "single index"),
    "access missing": ('{"steps": [{"worker": "model_0", "instruction": "a"}]}', "access missing"),
    "access gibberish": (_steps(("model_0", "a", "everything please")), "not understood"),
    "access dict": (_steps(("model_0", "a", {"x": 1})), "is not a list"),
    "access duplicate": (_steps(("model_0", "a", []), ("model_1", "b", [0, 0])), "repeated"),
    "access step strings": (_steps(("model_0", "a", []), ("model_1", "b", ["step 0"])), None),
    "worker case": (_steps(("MODEL_0", "a", [])), "not an exact id"),
    "worker spaced": (_steps(("Model 2", "a", [])), "not an exact id"),
    "worker number": (_steps((1, "a", [])), "not an exact id"),
    "empty instruction": (_steps(("model_0", "  ", [])), "empty instruction"),
    "null instruction": (_steps(("model_0", None, [])), "empty instruction"),
    "too many steps": (_steps(*[("model_0", f"s{i}", "all") for i in range(8)]), "exceed the limit"),
    "unequal lists": ("model_id = [0, 1]\nsubtasks = ['a']\naccess_list = [[], []]", "differ in length"),
    "non-string reasoning": (
        '{"reasoning": {"a": 1}, "steps": [{"worker": "model_0", "instruction": "a", "access": []}]}',
        "reasoning",
    ),
}

UNREPAIRABLE = {
    "empty": ("", "empty"),
    "whitespace": ("   \n ", "empty"),
    "prose": ("I think model 0 should do it.", "no workflow found"),
    "truncated json": ('{"reasoning": "x", "steps": [{"worker": "model_0", "instr', "no workflow found"),
    "unknown worker": (_steps(("gpt-7", "a", [])), "unknown worker 'gpt-7'"),
    "worker out of range": (_steps((9, "a", [])), "unknown worker '9'"),
    "worker null": (_steps((None, "a", [])), "worker must be a worker id"),
    "worker list": (_steps((["model_0"], "a", [])), "worker must be a worker id"),
    "steps not list": ('{"steps": "model_0 then model_1"}', "'steps' must be a list"),
    "step not object": ('{"steps": ["model_0"]}', "step 0 must be an object"),
    "no steps": ('{"reasoning": "stop", "steps": []}', "no steps"),
    "instruction not text": (_steps(("model_0", 42, [])), "instruction must be text"),
    "unclosed list": ("model_id = [0, 1\nsubtasks = ['a']\naccess_list = [[]]", "not closed"),
    "bad literal": ("model_id = [0]\nsubtasks = [open('x')]\naccess_list = [[]]", "not a valid list literal"),
    "lists not lists": ('{"model_id": 1, "subtasks": ["a"], "access_list": [[]]}', "must be a list"),
}


@pytest.mark.parametrize("name", sorted(REPAIRABLE))
def test_repairable_faults_are_repaired_and_recorded(name: str) -> None:
    text, fault = REPAIRABLE[name]
    workflow, repairs = check(text)
    assert workflow.steps, name
    for i, step in enumerate(workflow.steps):
        assert step.worker in IDS
        assert step.instruction.strip()
        assert all(0 <= j < i for j in step.access)
    if fault:
        assert any(fault in r.fault for r in repairs), [r.fault for r in repairs]


@pytest.mark.parametrize("name", sorted(UNREPAIRABLE))
def test_unrepairable_faults_raise_named_errors(name: str) -> None:
    text, message = UNREPAIRABLE[name]
    with pytest.raises(WorkflowError, match=message.replace("[", r"\[").replace("(", r"\(")):
        check(text)


def test_too_many_steps_keeps_the_last_step_and_remaps_access() -> None:
    text = _steps(*[("model_0", f"s{i}", []) for i in range(6)], ("model_1", "final", [0, 5]))
    workflow, _ = check(text, max_steps=3)
    assert [s.instruction for s in workflow.steps] == ["s0", "s1", "final"]
    assert workflow.steps[-1].access == [0]  # index 5 was dropped with its step


def test_empty_workflow_allowed_only_when_asked() -> None:
    workflow, _ = validate_workflow(parse_workflow('{"reasoning": "done", "steps": []}'), IDS, 5, allow_empty=True)
    assert workflow.steps == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_text_never_raises_anything_but_workflow_error(text: str) -> None:
    try:
        workflow, _ = check(text)
    except WorkflowError:
        return
    assert workflow.steps


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries({}, optional={"worker": json_values, "instruction": json_values, "access": json_values}),
        max_size=8,
    ),
    st.sampled_from(["json", "lists"]),
)
def test_fuzz_structured_garbage_never_raises_anything_but_workflow_error(steps, form: str) -> None:
    if form == "json":
        text = json.dumps({"reasoning": "r", "steps": steps})
    else:
        text = (
            f"model_id = {json.dumps([s.get('worker') for s in steps])}\n"
            f"subtasks = {json.dumps([s.get('instruction') for s in steps])}\n"
            f"access_list = {json.dumps([s.get('access') for s in steps])}"
        )
    try:
        workflow, _ = check(text)
    except WorkflowError:
        return
    for i, step in enumerate(workflow.steps):
        assert step.worker in IDS and all(0 <= j < i for j in step.access)


@pytest.mark.parametrize(
    "text",
    [
        '{"steps": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"steps": [], "reasoning": ' + "[" * 5_000 + "]" * 5_000 + "}",
        '{"steps": [{"worker": "model_0", "instruction": "a", "access": ' + "[" * 50_000 + "]" * 50_000 + "}]}",
        "model_id = " + "[" * 100_000 + "]" * 100_000 + "\nsubtasks = ['a']\naccess_list = [[]]",
    ],
    ids=["deep steps", "deep reasoning", "deep access", "deep paper lists"],
)
def test_pathological_nesting_is_a_workflow_error(text: str) -> None:
    """The parser's contract holds for any depth: a Workflow or a WorkflowError, never RecursionError."""
    with pytest.raises(WorkflowError):
        validate_workflow(parse_workflow(text), IDS, 5)


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=5), c),
        max_leaves=200,
    )
)
@settings(max_examples=200, deadline=None)
def test_any_json_structure_parses_or_fails_by_name(value: object) -> None:
    """Whatever the JSON, the result is a WorkflowError or a workflow the executor can run: 1 to max_steps steps,
    each naming a worker the conductor was shown, with a text instruction and access only to earlier steps."""
    for document in ({"steps": value}, {"steps": [value]}, {"reasoning": value, "steps": [{"worker": value}]}, value):
        try:
            workflow, repairs = validate_workflow(parse_workflow(json.dumps(document)), IDS, 5)
        except WorkflowError as exc:
            assert str(exc)  # named: a message the conductor's retry shows it
            continue
        assert 1 <= len(workflow.steps) <= 5 and isinstance(workflow.reasoning, str)
        for index, step in enumerate(workflow.steps):
            assert step.worker in IDS and isinstance(step.instruction, str) and step.instruction.strip()
            assert all(isinstance(j, int) and 0 <= j < index for j in step.access), (index, step.access)
            assert step.access == sorted(set(step.access))
        assert all(repair.fault and repair.action for repair in repairs)
