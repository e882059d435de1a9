"""GroupWriter, the one group-commit primitive: a lone write runs inline, concurrent ones go in groups, a
refused group is bisected, flush waits for everything, cancelled waiters never lose their write."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

from agl.store import GroupWriter
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

Item = tuple[int, bool]  # (id, refused)


class _Sink:
    """Writes a group after one loop turn; refuses a group holding a bad item (or, with ``per_item``,
    reports each bad item's error and writes the rest, as SQLite's savepoints do)."""

    def __init__(self, per_item: bool = False) -> None:
        self.per_item = per_item
        self.written: Counter[int] = Counter()
        self.calls: list[list[int]] = []
        self.tasks: list[asyncio.Task[object] | None] = []

    async def __call__(self, items: list[Item]) -> list[BaseException | None] | None:
        self.calls.append([i for i, _ in items])
        self.tasks.append(asyncio.current_task())
        await asyncio.sleep(0)  # a write in flight: others arrive meanwhile
        if self.per_item:
            outcomes: list[BaseException | None] = []
            for i, bad in items:
                if not bad:
                    self.written[i] += 1
                outcomes.append(ValueError(i) if bad else None)
            return outcomes
        if any(bad for _, bad in items):
            raise ValueError("refused")
        self.written.update(i for i, _ in items)
        return None


def test_a_lone_write_runs_in_the_callers_task() -> None:
    async def main() -> None:
        sink = _Sink()
        writer = GroupWriter[Item](sink)
        assert await writer.write((1, False)) is None
        assert sink.tasks == [asyncio.current_task()] and writer.grouped == 0

    asyncio.run(main())


def test_gathered_writes_of_one_loop_turn_share_a_group_even_when_the_sink_never_suspends() -> None:
    """SQLite's sink writes without suspending: plain writes then each run alone, one after another, while
    writes that ask to gather wait for the drain at the loop's next turn and go as one group."""

    async def main() -> None:
        calls: list[list[int]] = []

        async def sink(items: list[int]) -> None:
            calls.append(items)

        writer = GroupWriter[int](sink)
        assert await asyncio.gather(*(writer.write(i) for i in range(3))) == [None] * 3
        assert calls == [[0], [1], [2]]
        assert await asyncio.gather(*(writer.write(i, gather=True) for i in range(3, 7))) == [None] * 4
        assert calls[3:] == [[3, 4, 5, 6]] and not writer.busy

    asyncio.run(main())


def test_concurrent_writes_go_in_groups_of_at_most_max_group() -> None:
    async def main() -> None:
        sink = _Sink()
        writer = GroupWriter[Item](sink, max_group=4)
        outcomes = await asyncio.gather(*(writer.write((i, False)) for i in range(11)))
        assert outcomes == [None] * 11 and sink.written == Counter(range(11))
        assert sink.calls == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
        assert writer.grouped == 10 and writer.groups == 4

    asyncio.run(main())


def test_a_refused_group_is_bisected_until_the_bad_item_stands_alone() -> None:
    async def main() -> None:
        sink = _Sink()
        failed: list[int] = []
        writer = GroupWriter[Item](sink, on_failed=lambda item, _: failed.append(item[0]))
        writer.submit((0, False))
        writes = [writer.write((i, i == 5)) for i in range(1, 9)]
        outcomes = await asyncio.gather(*writes)
        assert [type(o) for o in outcomes] == [type(None)] * 4 + [ValueError] + [type(None)] * 3
        assert failed == [5] and sink.written == Counter(i for i in range(9) if i != 5)
        assert writer.failed == 1 and writer.written == 8

    asyncio.run(main())


def test_a_sink_reporting_per_item_outcomes_is_not_bisected() -> None:
    async def main() -> None:
        sink = _Sink(per_item=True)
        writer = GroupWriter[Item](sink)
        writer.submit((0, False))
        outcomes = await asyncio.gather(*(writer.write((i, i == 3)) for i in range(1, 6)))
        assert isinstance(outcomes[2], ValueError) and sink.calls == [[0], [1, 2, 3, 4, 5]]

    asyncio.run(main())


def test_other_errors_fail_the_whole_group() -> None:
    async def sink(items: list[int]) -> None:
        raise OSError("down")

    async def main() -> None:
        writer = GroupWriter[int](sink)
        outcome = await writer.write(1)
        assert isinstance(outcome, OSError) and writer.failed == 1

    asyncio.run(main())


class GroupWriterMachine(RuleBasedStateMachine):
    """Random interleavings of waiting writers, fire-and-forget submits, refused items, cancelled waiters,
    loop turns and flushes. Invariants: every good item is written exactly once and never reported failed;
    every bad item is reported failed and never written; a flush returns only when nothing is queued."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.sink = _Sink()
        self.failed: Counter[int] = Counter()
        self.writer = GroupWriter[Item](
            self.sink, max_group=3, on_failed=lambda item, _: self.failed.update([item[0]])
        )
        self.items: dict[int, bool] = {}
        self.unstarted: dict[int, bool] = {}
        self.ids = itertools.count()
        self.in_write_all: set[int] = set()
        self.waiters: dict[int, asyncio.Task[BaseException | None]] = {}

    def _new(self, bad: bool) -> Item:
        item = (next(self.ids), bad)
        self.items[item[0]] = bad
        return item

    @rule(per_item=st.booleans())
    @precondition(lambda self: not self.items and not self.unstarted)
    def choose_sink(self, per_item: bool) -> None:
        self.sink.per_item = per_item

    @rule(bad=st.booleans(), gather=st.booleans())
    def write(self, bad: bool, gather: bool) -> None:
        item = (next(self.ids), bad)
        self.unstarted[item[0]] = bad

        async def write() -> BaseException | None:
            self.items[item[0]] = self.unstarted.pop(item[0])  # a task cancelled before it ran owes nothing
            return await self.writer.write(item, gather=gather)

        self.waiters[item[0]] = self.loop.create_task(write())

    @rule(bads=st.lists(st.booleans(), min_size=1, max_size=7))
    def write_all(self, bads: list[bool]) -> None:
        items = [(next(self.ids), bad) for bad in bads]
        self.unstarted.update(items)

        async def write_all() -> BaseException | None:
            for i, _ in items:
                self.items[i] = self.unstarted.pop(i)
            outcomes = await self.writer.write_all(items)
            assert [isinstance(o, ValueError) for o in outcomes] == bads
            return None

        task = self.loop.create_task(write_all())
        for i, _ in items:
            self.waiters[i] = task
            self.in_write_all.add(i)

    @rule(bad=st.booleans())
    def submit(self, bad: bool) -> None:
        item = self._new(bad)

        async def submit() -> None:
            self.writer.submit(item)

        self.loop.run_until_complete(submit())

    @rule(turns=st.integers(1, 4))
    def turn(self, turns: int) -> None:
        for _ in range(turns):
            self.loop.run_until_complete(asyncio.sleep(0))

    @rule(data=st.data())
    @precondition(lambda self: any(not t.done() for t in self.waiters.values()))
    def cancel(self, data: st.DataObject) -> None:
        pending = sorted(i for i, t in self.waiters.items() if not t.done())
        self.waiters[data.draw(st.sampled_from(pending))].cancel()

    @rule()
    def flush(self) -> None:
        self.loop.run_until_complete(self.writer.flush())
        assert self.writer.queued == 0 and not self.writer.busy
        self.loop.run_until_complete(asyncio.sleep(0))  # let finished writers return
        for i, bad in self.items.items():
            assert self.sink.written[i] == (0 if bad else 1), (i, self.sink.written)
            assert self.failed[i] == (1 if bad else 0), (i, self.failed)
        for i, task in self.waiters.items():
            assert task.done()
            if not task.cancelled() and i not in self.in_write_all:  # (write_all checks its own)
                assert isinstance(task.result(), ValueError) == self.items[i]
        self.unstarted.clear()

    @invariant()
    def never_written_twice_nor_bad_written(self) -> None:
        assert all(n == 1 for n in self.sink.written.values())
        assert not any(self.items[i] for i in self.sink.written)
        assert all(n == 1 and self.items[i] for i, n in self.failed.items())

    def teardown(self) -> None:
        try:
            self.flush()
        finally:
            self.loop.close()


GroupWriterMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_group_writer_state_machine = GroupWriterMachine.TestCase
