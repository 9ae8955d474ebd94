"""The async API (``store.aio``) on SQLite (aiosqlite) and PostgreSQL (psycopg async): the same
behaviours as the sync API, the same bytes, and many tasks sharing one store."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from store.aio import AsyncSessionManager, AsyncSessionStore
from store.db.engine import ensure_schema, make_async_engine
from store.errors import SessionChanged, SessionClaimed
from store.format import js_parse
from store.retention import RetentionPolicy
from store.services import CompactionSettings, DeterministicSummarizer, SummaryResponse
from store.session_store import SessionStore
from tests.apidiff.generate import generate, generator_engine
from tests.apidiff.pi import run_on_pi
from tests.apidiff.script import Outcome, first_difference, parse_script, run_script_async
from tests.conftest import Clock
from tests.oracle_support import ORACLE_SKIP_REASON, oracle_available

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


async def test_create_append_branch_and_reopen(astore: AsyncSessionStore) -> None:
    sm = await astore.create("/work/p")
    assert await astore.find_by_id(sm.session_id) is None  # nothing stored before a conversation
    root = await sm.append_message(user("Plan the refactor"))
    plan_a = await sm.append_message(assistant("Plan A"))
    await sm.branch(root)
    plan_b = await sm.append_message(assistant("Plan B"))
    assert await sm.get_branch_ids() == [root, plan_b]
    assert [e["id"] for e in await sm.get_children(root)] == [plan_a, plan_b]
    reopened = await astore.open(sm.session_id)
    assert reopened.get_leaf_id() == plan_b and reopened.get_version() == sm.get_version()
    assert (await reopened.get_entry(plan_a))["message"]["content"][0]["text"] == "Plan A"
    sm.reset_leaf()
    await sm.append_custom_entry("ext.x", {"a": 1})
    assert await sm.get_branch_ids() == [sm.get_leaf_id()]


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


async def test_two_managers_conflict_and_refresh(astore: AsyncSessionStore) -> None:
    sm = await astore.create("/work/p")
    await sm.append_message(user("hi"))
    other = await astore.open(sm.session_id)
    theirs = await other.append_message(user("and tests"))
    with pytest.raises(SessionChanged):
        await sm.append_message(user("stale"))
    with pytest.raises(SessionChanged):
        async with sm.batch():
            await sm.append_message(user("stale too"))
    await sm.refresh()
    assert sm.get_leaf_id() == theirs
    mine = await sm.append_message(assistant("ok"))
    assert await (await astore.open(sm.session_id)).get_branch_ids() == [*(await other.get_branch_ids()), mine]


async def test_claims_fence_other_writers(astore: AsyncSessionStore) -> None:
    sm = await astore.create("/work/p")
    await sm.append_message(user("hi"))
    claim = await sm.claim("host-a", ttl_ms=60_000)
    other = await astore.open(sm.session_id)
    with pytest.raises(SessionClaimed):
        await other.append_message(user("not mine"))
    await sm.append_message(user("mine"))
    assert [c.owner for c in await astore.claims()] == ["host-a"] and claim.token == 1
    await sm.release_claim()
    assert await astore.claims() == []


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


async def test_branch_with_generated_summary_and_create_branched_session(astore: AsyncSessionStore) -> None:
    sm = await astore.create("/work/p")
    root = await sm.append_message(user("start"))
    await sm.append_message(assistant("one way"))
    summary_id = await sm.branch_with_generated_summary(root, SlowSummarizer().inner)
    assert (await sm.get_entry(summary_id))["type"] == "branch_summary"
    old = sm.session_id
    new_id = await sm.create_branched_session(summary_id)
    assert sm.session_id == new_id != old and (await sm.get_header())["parentSession"] == old
    assert await sm.get_branch_ids() == [root, summary_id]


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
    cancelled = 0
    for i in range(60):
        task = asyncio.create_task(sm.append_message(user(f"m{i}", i)))
        await asyncio.sleep(0.0003 * (i % 5))  # cancel at different points of the call
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


# ---------------------------------------------------------------------------------- against Pi
API_SCRIPTS = FIXTURES / "api_scripts"


@pytest.fixture
async def async_engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_async_engine(db_url)
    async with engine.connect() as conn:
        await conn.run_sync(lambda sync_conn: ensure_schema(sync_conn.engine))
    yield engine
    await engine.dispose()


async def test_committed_scripts_through_the_async_api_give_pis_outcome(async_engine: AsyncEngine) -> None:
    """The operation-script goldens (tests/test_api_differential.py) through ``store.aio``: Pi's
    return values, snapshots and file bytes — so what the async API writes is what the sync one does.
    Every fourth random golden and every regression: the sync suite runs them all, and both APIs
    run the same code (CI time)."""
    lines = gzip.decompress((API_SCRIPTS / "random.jsonl.gz").read_bytes()).decode("ascii").split("\n")
    cases = [(case["script"], Outcome.from_json(case["pi"])) for case in map(js_parse, filter(None, lines))][::4]
    for path in sorted((API_SCRIPTS / "regressions").glob("*.script.json")):
        name = path.name.removesuffix(".script.json")
        expected = json.loads((path.parent / f"{name}.pi.json").read_text("utf-8"))
        files = {f.stem: f.read_bytes() for f in (path.parent / f"{name}.files").glob("*.jsonl")}
        cases.append(
            (
                parse_script(path.read_text("utf-8")),
                Outcome([js_parse(json.dumps(r)) for r in expected["results"]], expected["states"], files),
            )
        )
    assert len(cases) >= 40
    differences = [
        f"{script['name']}: {diff}"
        for script, pi in cases
        if (diff := first_difference(pi, await run_script_async(async_engine, script), script))
    ]
    assert not differences, f"{len(differences)}/{len(cases)} differ:\n" + "\n".join(differences[:5])


@pytest.mark.oracle
@pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)
async def test_fresh_random_scripts_through_the_async_api_on_the_live_pi(async_engine: AsyncEngine) -> None:
    gen = generator_engine()
    scripts = [generate(seed, 20, 120, gen) for seed in range(910_001, 910_005)]
    outcomes = await asyncio.to_thread(run_on_pi, scripts)
    differences = [
        f"{script['name']}: {diff}"
        for script, pi in zip(scripts, outcomes, strict=True)
        if (diff := first_difference(pi, await run_script_async(async_engine, script), script))
    ]
    assert not differences, "\n".join(differences)
