"""The one place that decides who may see a run (service/access.py), on a real service and sim pool: another
principal's run is RunNotFound for every read, continuation, tool answer, cancel, wait and stream; lists hold a
principal's own runs; runs started are recorded as the starter's; an admin sees and acts on every run."""

from __future__ import annotations

import inspect

import pytest

from conductor_mcp.core.principal import LOCAL, Principal
from conductor_mcp.core.records import ToolResult
from conductor_mcp.errors import RunNotFound
from conductor_mcp.service.access import Access, Front, Reads
from conductor_mcp.service.reader import RunReader
from conductor_mcp.service.service import Service
from tests.conftest import ask

ALICE, BOB, OPS = Principal("alice"), Principal("bob"), Principal("ops", admin=True)


async def test_another_principals_run_is_not_found_whatever_is_asked(service: Service) -> None:
    alice, bob, ops = Access(service, ALICE), Access(service, BOB), Access(service, OPS)
    run = alice.start(ask("What is 6 * 7?", pool="sim"))
    assert run.principal == "alice"
    await alice.wait(run.id, None)
    refusals = [
        lambda: bob.get_run(run.id),
        lambda: bob.step_messages(run.id, "0"),
        lambda: bob.continue_run(run.id),
        lambda: bob.continue_run(run.id, "Shorter."),
        lambda: bob.answer_tool_calls(run.id, [ToolResult(call_id="c", output="x")]),
        lambda: bob.executes_here(run.id),
        lambda: bob.run_pool(run),
    ]
    for refused in refusals:
        with pytest.raises(RunNotFound, match=f"no run with id {run.id!r}"):
            refused()
    with pytest.raises(RunNotFound):
        await bob.cancel(run.id)
    with pytest.raises(RunNotFound):
        await bob.wait(run.id, 0)
    with pytest.raises(RunNotFound):
        async for _ in bob.follow(run.id):
            pass
    assert run.id not in {r["id"] for r in bob.list_runs(50)}
    assert [r["id"] for r in alice.list_runs(50)] == [run.id]
    assert ops.get_run(run.id).status == "done" and ops.step_messages(run.id, "0")

    bobs = await bob.plan(ask("Explain recursion.", pool="sim"))
    with pytest.raises(RunNotFound):
        alice.estimate(bobs)
    assert bob.estimate(bobs).high_usd >= bob.estimate(bobs).low_usd and not bob.executes_here(bobs.id)
    assert bobs.principal == "bob" and {r["id"] for r in ops.list_runs(50)} == {run.id, bobs.id}
    by_admin = ops.continue_run(run.id, "Shorter.")  # a follow-up belongs to the principal of the run it follows
    assert by_admin.principal == "alice" and alice.get_run(by_admin.id).parent_id == run.id
    await ops.wait(by_admin.id, None)
    assert Access(service, LOCAL).get_run(bobs.id).principal == "bob"  # the local user is an admin


async def test_a_running_run_of_another_cannot_be_cancelled_or_followed(service: Service) -> None:
    alice, bob = Access(service, ALICE), Access(service, BOB)
    run = alice.start(ask("What is 6 * 7?", pool="sim"))
    with pytest.raises(RunNotFound):
        await bob.cancel(run.id, wait_s=0)
    with pytest.raises(RunNotFound):
        await bob.wait(run.id, None, cancel_on_exit=True)
    assert (await alice.wait(run.id, None)).status == "done"  # Bob's calls did nothing to it


async def test_reads_over_a_lease_free_reader_are_scoped_the_same_way(service: Service) -> None:
    run = Access(service, ALICE).start(ask("What is 6 * 7?", pool="sim"))
    await service.wait(run.id, None)
    with RunReader.open(service.settings) as reader:
        with pytest.raises(RunNotFound):
            Reads(reader, BOB).get_run(run.id)
        assert Reads(reader, BOB).list_runs() == []
        assert Reads(reader, LOCAL).get_run(run.id).principal == "alice"


async def test_a_door_holds_a_front_that_offers_only_checked_run_operations(service: Service) -> None:
    """What a door holds (service/access.py's Front): shared views, and run operations only through a principal's
    Access, whose wrappers keep the service's own signatures."""
    front = Front(service)
    assert front.settings is service.settings and front.pools is service.pools
    assert not any(hasattr(front, name) for name in ("start", "wait", "cancel", "continue_run", "get_run", "plan"))
    run = front.access(ALICE).start(ask("What is 6 * 7?", pool="sim"))
    with pytest.raises(RunNotFound):
        front.reads(BOB).get_run(run.id)
    for name in ("wait", "cancel", "continue_run", "answer_tool_calls", "executes_here"):
        assert inspect.signature(getattr(Access, name)) == inspect.signature(getattr(Service, name)), name
    assert (await front.access(ALICE).wait(run.id, None)).status == "done"
