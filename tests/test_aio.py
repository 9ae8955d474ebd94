"""The async API (``store.aio``) on SQLite (aiosqlite) and PostgreSQL (psycopg async): what is its
own — its engines, nested batches across awaits, awaitable summarizers, many tasks sharing one store,
cancellation — and its results equal to the sync API's.

The sync API's behavioural suites run on the async API as well (the modules marked
``pytest.mark.both_apis``: manager, context, ownership, retention, search, listing, round trip,
and the operation-script goldens against Pi; through tests/async_as_sync.py): they are not
repeated here."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from store.aio import AsyncSessionManager, AsyncSessionStore
from store.db.engine import BadSetting
from store.errors import SessionChanged, StoreClosed
from store.retention import RetentionPolicy
from store.services import CompactionSettings, DeterministicSummarizer, SummaryResponse
from store.session_store import SessionStore
from tests.conftest import Clock

pytestmark = pytest.mark.anyio
FIXTURES = Path(__file__).parent / "fixtures"
SESSIONS = FIXTURES / "oracle" / "sessions"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the drivers (aiosqlite, psycopg) are asyncio's


@pytest.fixture
async def astore(db_url: str, clock: Clock) -> AsyncIterator[AsyncSessionStore]:
    async with await AsyncSessionStore.connect(db_url, clock=clock) as store:
        yield store


def user(text_: str, ts: int = 1) -> dict:
    return {"role": "user", "content": text_, "timestamp": ts}


def assistant(text_: str, ts: int = 2) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text_}], "timestamp": ts}


async def test_the_async_engine_gets_the_sync_engines_connection_settings(astore: AsyncSessionStore) -> None:
    async with astore.engine.connect() as conn:
        if astore.engine.dialect.name == "sqlite":
            pragmas = {
                name: (await conn.execute(text(f"PRAGMA {name}"))).scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
            }
            assert pragmas == {"journal_mode": "wal", "busy_timeout": 30_000, "foreign_keys": 1, "synchronous": 1}
        else:
            assert (await conn.execute(text("SHOW lock_timeout"))).scalar() == "30s"
    assert astore.engine.dialect.is_async and astore.engine.dialect.driver in ("aiosqlite", "psycopg")


async def test_a_plain_file_path_names_the_same_sqlite_store_for_both_apis(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with await AsyncSessionStore.connect("sessions.db") as store:
        sm = await store.create("/work/p")
        await sm.append_message(user("hi"))
    with SessionStore.connect(str(tmp_path / "sessions.db")) as sync_store:
        assert [info.id for info in sync_store.list_all()] == [sm.session_id]


async def test_both_apis_take_the_same_urls(db_url: str) -> None:
    """A URL naming the async driver (what an async server is given) failed in the sync API and
    the CLI with SQLAlchemy's MissingGreenlet; psycopg2/asyncpg URLs failed in the sync API with
    ModuleNotFoundError and were silently swapped for psycopg by the async one."""
    url = make_url(db_url)
    named = url.set(drivername="sqlite+aiosqlite" if url.get_backend_name() == "sqlite" else "postgresql+psycopg_async")
    async with await AsyncSessionStore.connect(named.render_as_string(hide_password=False)) as store:
        sm = await store.create("/work/urls")
        await sm.append_message(user("hi"))
    with SessionStore.connect(named.render_as_string(hide_password=False)) as sync_store:
        assert sm.session_id in [info.id for info in sync_store.list_all()]
    other = url.set(drivername="sqlite+pysqlcipher" if url.get_backend_name() == "sqlite" else "postgresql+asyncpg")
    refusals = []
    for connect in (SessionStore.connect, AsyncSessionStore.connect):
        with pytest.raises(BadSetting) as refused:
            opened = connect(other.render_as_string(hide_password=False))
            if asyncio.iscoroutine(opened):
                await opened
        refusals.append(str(refused.value))
    assert refusals[0] == refusals[1] and f"not {other.get_driver_name()}" in refusals[0]


async def test_batch_commits_together_and_a_failed_batch_stores_nothing(astore: AsyncSessionStore) -> None:
    sm = await astore.create("/work/p")
    first = await sm.append_message(user("hi"))
    async with sm.batch():
        ids = [await sm.append_custom_entry("ext.tick", {"i": i}) for i in range(5)]
        assert (await sm.get_branch_ids())[-5:] == ids  # reads inside see the batch
        async with sm.batch():  # nested: the same transaction
            await sm.append_session_info("named")
    version = sm.get_version()
    with pytest.raises(RuntimeError, match="boom"):
        async with sm.batch():
            await sm.append_custom_entry("ext.lost", None)
            raise RuntimeError("boom")
    assert sm.get_leaf_id() != first and sm.get_version() == version
    entries = await (await astore.open(sm.session_id)).get_entries()
    assert [e.get("customType") for e in entries] == [None, *["ext.tick"] * 5, None]
    assert await sm.get_session_name() == "named"


async def test_context_list_search_and_stats_equal_the_sync_apis(astore: AsyncSessionStore, db_url: str) -> None:
    sm = await astore.create("/work/p")
    first = await sm.append_message(user("find the needle"))
    await sm.append_model_change("anthropic", "claude")
    await sm.append_message(assistant("found it"))
    await sm.append_context_edit(first, {"content": "edited"})
    sync_store = astore.sync
    other = SessionStore.connect(db_url)
    try:
        sync_sm = other.open(sm.session_id)
        assert await sm.build_session_context() == sync_sm.build_session_context()
        assert await sm.build_context_entries() == sync_sm.build_context_entries()
        assert await astore.list("/work/p") == other.list("/work/p") != []
        assert await astore.list_all(sort="created") == other.list_all(sort="created")
        assert await astore.search("needle") == other.search("needle") != []
        assert await astore.stats(sm.session_id) == other.stats(sm.session_id)
        assert sync_store.engine is astore.engine.sync_engine  # the one implementation, on the async driver
    finally:
        other.close()


@pytest.mark.parametrize(
    "name",
    ["small-seed1-0.jsonl", "edge-crlf-no-final-newline.jsonl", "medium-seed1-0.jsonl", "edge-invalid-utf8.jsonl"],
)
async def test_import_then_export_is_byte_identical(astore: AsyncSessionStore, tmp_path: Path, name: str) -> None:
    source = SESSIONS / name
    session_id = await astore.import_jsonl(source)
    out = tmp_path / "out.jsonl"
    written = await astore.export_jsonl(session_id, out)
    assert out.read_bytes() == source.read_bytes() and written == len(source.read_bytes())
    assert b"".join([chunk async for chunk in astore.iter_export(session_id)]) == source.read_bytes()
    assert (await astore.import_file(source)).status == "unchanged"


async def test_import_path_delete_and_prune(astore: AsyncSessionStore, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in ("small-seed1-0.jsonl", "small-seed2-0.jsonl"):
        (folder / name).write_bytes((SESSIONS / name).read_bytes())
    reports = await astore.import_path(folder)
    assert [r.status for r in reports] == ["imported", "imported"]
    dry = await astore.prune(RetentionPolicy(0), apply=False)
    assert dry.sessions_seen == 2 and not dry.applied
    applied = await astore.prune(RetentionPolicy(0), apply=True)  # on SQLite: VACUUM through aiosqlite
    assert applied.applied and applied.removed.rows == dry.removed.rows
    assert (applied.vacuum is not None) == (astore.engine.dialect.name == "sqlite")
    deleted = await astore.delete(reports[0].session_id)
    assert deleted.session_ids == [reports[0].session_id]
    assert [info.id for info in await astore.list_all()] == [reports[1].session_id]


class SlowSummarizer:
    """An awaitable summarizer that answers only once another task lets it (so the event loop
    must keep running while the store waits for the summary)."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.inner = DeterministicSummarizer()

    async def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> SummaryResponse:
        await self.go.wait()
        return self.inner.summarize(system_prompt, prompt, max_tokens)


async def _conversation(sm: AsyncSessionManager, turns: int) -> None:
    for i in range(turns):
        await sm.append_message(user(f"question {i} " + "words " * 200, i))
        await sm.append_message(assistant(f"answer {i} " + "more " * 200, i))


async def test_compact_with_an_async_summarizer_matches_the_sync_compaction(
    astore: AsyncSessionStore, db_url: str
) -> None:
    settings = CompactionSettings(True, 16384, 400)
    sm = await astore.create("/work/p")
    await _conversation(sm, 6)
    copy = await astore.fork_from(sm.session_id, "/work/p")
    summarizer = SlowSummarizer()

    async def release() -> None:
        await asyncio.sleep(0.05)
        summarizer.go.set()

    compaction_id, _ = await asyncio.gather(sm.compact(summarizer, settings), release())
    with SessionStore.connect(db_url) as sync_store:  # the same session, the sync way
        sync_id = sync_store.open(copy.session_id).compact(DeterministicSummarizer(), settings)
    ours, theirs = await sm.get_entry(compaction_id), await copy.get_entry(sync_id)
    same = ("summary", "firstKeptEntryId", "tokensBefore", "details", "usage", "parentId")
    assert {k: ours[k] for k in same} == {k: theirs[k] for k in same}
    assert len(summarizer.inner.requests) == 1
    # a plain (synchronous) summarizer is accepted too: it runs in a worker thread
    await _conversation(sm, 3)
    assert (await sm.get_entry(await sm.compact(DeterministicSummarizer(), settings)))["type"] == "compaction"
    # and an async one behind a plain decorator (a logging or retry wrapper): its coroutine is
    # awaited (it was taken as the summary: AttributeError, "coroutine was never awaited")
    await _conversation(sm, 3)
    wrapped = DecoratedSummarizer()
    assert (await sm.get_entry(await sm.compact(wrapped, settings)))["type"] == "compaction"
    assert len(wrapped.inner.requests) == 1


def _logged(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        return method(*args, **kwargs)
    return wrapper


class DecoratedSummarizer:
    def __init__(self) -> None:
        self.inner = DeterministicSummarizer()

    @_logged
    async def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> SummaryResponse:
        return self.inner.summarize(system_prompt, prompt, max_tokens)


async def test_a_compaction_cancelled_while_the_summary_is_made_writes_nothing(astore: AsyncSessionStore) -> None:
    """The whole compact() once ran shielded: the caller's cancellation waited for the summary
    (a hung model: two requests of up to 120 s) and was delivered after the compaction had been
    stored. Only the reads before the summary and the append after it are shielded now."""
    settings = CompactionSettings(True, 16384, 400)
    sm = await astore.create("/work/p")
    await _conversation(sm, 6)
    before = len(await sm.get_entries())
    summarizer = SlowSummarizer()  # never answers: nobody sets go
    task = asyncio.create_task(sm.compact(summarizer, settings))
    await asyncio.sleep(0.3)  # prepared, waiting for the summary
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10)
    if not done:  # (the old way: it waits for the summary, which never comes)
        summarizer.go.set()
        await asyncio.wait({task})
    assert task in done and task.cancelled(), "the cancellation waited for the summary"
    assert len(await sm.get_entries()) == before
    reopened = await astore.open(sm.session_id)
    assert reopened.get_leaf_id() == sm.get_leaf_id()
    summarizer.go.set()
    assert (await sm.get_entry(await sm.compact(summarizer, settings)))["type"] == "compaction"


async def test_a_branch_summary_cancelled_while_it_is_made_writes_nothing(astore: AsyncSessionStore) -> None:
    sm = await astore.create("/work/p")
    await _conversation(sm, 3)
    target, leaf = (await sm.get_branch())[1]["id"], sm.get_leaf_id()
    summarizer = SlowSummarizer()
    task = asyncio.create_task(sm.branch_with_generated_summary(target, summarizer))
    await asyncio.sleep(0.3)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=10)
    if not done:
        summarizer.go.set()
        await asyncio.wait({task})
    assert task in done and task.cancelled(), "the cancellation waited for the summary"
    assert sm.get_leaf_id() == leaf and len(await sm.get_entries()) == 6


async def test_many_tasks_share_one_store_without_losing_appends(astore: AsyncSessionStore) -> None:
    tasks, appends = 32, 10

    async def writer(n: int) -> tuple[str, list[str]]:
        sm = await astore.create(f"/work/{n}")
        ids = [await sm.append_message(user(f"task {n} message {i}", i)) for i in range(appends)]
        return sm.session_id, ids

    results = await asyncio.gather(*(writer(n) for n in range(tasks)))
    for session_id, ids in results:
        assert await (await astore.open(session_id)).get_branch_ids() == ids
    assert sum(info.message_count for info in await astore.list_all()) == tasks * appends


async def test_tasks_racing_on_one_session_store_every_acknowledged_append_once(astore: AsyncSessionStore) -> None:
    sm = await astore.create("/work/p")
    await sm.append_message(user("shared"))
    acknowledged: list[str] = []

    async def racer(n: int) -> int:
        mine = await astore.open(sm.session_id)
        conflicts = 0
        for i in range(8):
            while True:
                try:
                    acknowledged.append(await mine.append_custom_entry("ext.race", {"n": n, "i": i}))
                    break
                except SessionChanged:
                    conflicts += 1
                    await mine.refresh()
        return conflicts

    await asyncio.gather(*(racer(n) for n in range(4)))
    stored = [
        e["id"] for e in await (await astore.open(sm.session_id)).get_entries() if e.get("customType") == "ext.race"
    ]
    assert sorted(stored) == sorted(acknowledged) and len(stored) == 32


async def test_a_cancelled_call_finishes_its_database_work_and_the_manager_stays_in_step(
    astore: AsyncSessionStore,
) -> None:
    """A server cancels a request's task whenever its client goes away: the call's transaction
    must not be cut off after its commit was sent, or the manager's leaf and version would no
    longer be the store's and its next write would fail with SessionChanged."""
    sm = await astore.create("/work/p")
    await sm.append_message(user("start"))
    timings = []
    for i in range(5):
        started = time.perf_counter()
        await sm.append_message(user(f"timed {i}"))
        timings.append(time.perf_counter() - started)
    call = sorted(timings)[2]  # cancel within a call's time, however fast the machine
    cancelled = 0
    for i in range(60):
        task = asyncio.create_task(sm.append_message(user(f"m{i}", i)))
        await asyncio.sleep(call * (i % 5) / 10)  # cancel at different points of the call
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            cancelled += 1
    assert cancelled > 30  # most calls were cancelled while they ran
    stored = await astore.open(sm.session_id)
    assert (stored.get_version(), stored.get_leaf_id()) == (sm.get_version(), sm.get_leaf_id())
    chain = await stored.get_entries()
    assert [e["parentId"] for e in chain[1:]] == [e["id"] for e in chain[:-1]]  # one branch, nothing lost midway
    await sm.append_message(user("after"))  # no SessionChanged: the manager saw every commit

    with pytest.raises(TimeoutError):  # a batch cancelled at its own await stores nothing of it
        async with asyncio.timeout(0.05), sm.batch():
            await sm.append_custom_entry("ext.lost", None)
            await asyncio.sleep(10)
    entries = await (await astore.open(sm.session_id)).get_entries()
    assert "ext.lost" not in [e.get("customType") for e in entries] and entries[-1]["id"] == sm.get_leaf_id()


async def test_a_batch_cancelled_while_it_waits_for_the_lock_leaves_no_transaction_open(
    astore: AsyncSessionStore, db_url: str
) -> None:
    """A batch whose task is cancelled while it waits for the session's write lock (another
    writer holds it) takes the lock once that writer is done — the call is not cut off — and
    must then let it go at once, not hold it (and the database's write lock, on SQLite) until
    the abandoned block is garbage-collected."""
    sm = await astore.create("/work/p")
    await sm.append_message(user("start"))
    with SessionStore.connect(db_url) as other_store:
        holder = other_store.open(sm.session_id)
        with holder.batch():  # the lock a batch takes first
            task = asyncio.create_task(_enter_a_batch(sm))
            await asyncio.sleep(0.3)  # the task waits for the lock
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        other = other_store.open(sm.session_id)
        async with asyncio.timeout(10):  # the lock is free: no waiting for the 30 s lock timeout
            written = await asyncio.to_thread(other.append_custom_entry, "ext.after", None)
    await sm.refresh()
    assert sm.get_leaf_id() == written
    await sm.append_message(user("the cancelled batch left the manager usable"))


async def _enter_a_batch(sm: AsyncSessionManager) -> None:
    async with sm.batch():
        await sm.append_custom_entry("ext.never", None)


async def test_a_sweep_cancelling_every_task_does_not_stop_a_store_call(astore: AsyncSessionStore,
                                                                       db_url: str) -> None:
    """Shutdown handlers cancel every task of the loop, and a store call ran in a task of its
    own: cancelled before it started, a batch's ending never ran and its transaction — with the
    database's write lock on SQLite — stayed open; cancelled midway, a commit could land that the
    manager did not know of. The call's task cannot be cancelled: the batch ends (committed, as
    its block had finished) and the caller gets the cancellation."""
    sm = await astore.create("/work/p")
    await sm.append_message(user("start"))
    block_done = asyncio.Event()

    async def batcher() -> None:
        async with sm.batch():
            await sm.append_custom_entry("ext.batched", None)
            await block_done.wait()

    harness = asyncio.all_tasks()  # the test runner's: not swept here
    task = asyncio.create_task(batcher())
    await asyncio.sleep(0.1)
    block_done.set()
    await asyncio.sleep(0)  # the batcher now awaits the call that ends its block
    swept = asyncio.all_tasks() - harness
    assert len(swept) == 2  # the batcher and its call's task
    for other in swept:
        other.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with SessionStore.connect(db_url) as other_store:
        async with asyncio.timeout(10):  # no lock left behind: no waiting for the 30 s lock timeout
            written = await asyncio.to_thread(other_store.open(sm.session_id).append_custom_entry, "ext.after", None)
    entries = await (await astore.open(sm.session_id)).get_entries()
    assert [e.get("customType") for e in entries[-2:]] == ["ext.batched", "ext.after"] and entries[-1]["id"] == written
    await sm.refresh()
    await sm.append_message(user("the manager is usable"))


async def test_a_closed_store_refuses_calls_and_keeps_no_connection(db_url: str, clock: Clock) -> None:
    """close() disposed the pool, and the next call made a new one: a closed store went on
    writing and its connections stayed open. Calls after close() raise StoreClosed, the sync
    API's as the async one's."""
    store = await AsyncSessionStore.connect(db_url, clock=clock)
    sm = await store.create("/work/p")
    await sm.append_message(user("one"))
    await store.close()
    with pytest.raises(StoreClosed):
        await sm.append_message(user("two"))
    with pytest.raises(StoreClosed):
        await store.list_all()
    sync_store = SessionStore.connect(db_url, clock=clock)
    sync_manager = sync_store.open(sm.session_id)
    sync_store.close()
    with pytest.raises(StoreClosed):
        sync_manager.append_message(user("three"))
    with SessionStore.connect(db_url) as again:
        assert [e["message"]["content"] for e in again.open(sm.session_id).get_entries()] == ["one"]
