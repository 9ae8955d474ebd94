"""``list`` with sort orders, filters and cursor pagination, on both engines: pages put together
are the whole listing, in the order a plain sort of the same data gives."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import event

from store.analysis.listing import SORTS, BadCursor, ListFilter, list_rows
from store.db.engine import read_transaction
from store.session_store import SessionInfo, SessionStore

pytestmark = pytest.mark.both_apis  # the tests on the `store` fixture: on the sync API, then the async one


def usage(cost: float) -> dict:
    return {"input": 100, "output": 10, "cacheRead": 5, "cacheWrite": 1, "totalTokens": 116,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost}}


def populate(store: SessionStore) -> list[str]:
    """Twelve sessions in three directories, some named, with different costs and models."""
    ids = []
    for i in range(12):
        sm = store.create(f"/work/{'abc'[i % 3]}")
        sm.append_message({"role": "user", "content": f"task number {i}", "timestamp": 1_700_000_000_000 + i * 7 % 12})
        if i % 4:
            sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "done"}], "api": "x",
                               "provider": "anthropic" if i % 2 else "openai", "model": f"m{i % 3}",
                               "usage": usage(round(0.1 * (i % 5), 2)), "stopReason": "stop",
                               "timestamp": 1_700_000_000_000 + i * 7 % 12})
        if i % 3 == 0:
            sm.append_session_info(f"Named {chr(ord('A') + (11 - i))} session")
        ids.append(sm.get_session_id())
    return ids


NAMES = {"Éclair ÜBER Plan": ["éclair über", "ÉCLAIR", "über plan"], "Мир СЕССИЯ": ["мир сессия", "сессия"],
         "ΩMEGA straße": ["ωmega", "STRASSE"]}  # casefold's ß → ss is no lower(): STRASSE finds nothing


def named(store: SessionStore) -> dict[str, str]:
    ids = {}
    for name in NAMES:
        sm = store.create("/work/names")
        sm.append_message({"role": "user", "content": "hello", "timestamp": 1_700_000_000_000})
        sm.append_session_info(name)
        ids[name] = sm.get_session_id()
    return ids


def test_the_name_filter_ignores_case_in_every_script(store: SessionStore) -> None:
    """SQLite's lower() folds ASCII only: "éclair" did not find "Éclair" (nor "мир" "Мир")."""
    ids = named(store)
    for name, queries in NAMES.items():
        for query in queries:
            found = {i.id for i in store.list_all(name=query)}
            assert found == (set() if query == "STRASSE" else {ids[name]}), (name, query)


@pytest.mark.sync_api_only("a database of its own with the C locale")
def test_the_name_filter_ignores_case_in_a_c_locale_postgresql_database() -> None:
    from tests.analysis.test_search_locale import C_LOCALE
    from tests.conftest import scratch_pg_database

    with scratch_pg_database("pi_store_names", C_LOCALE) as url, SessionStore.connect(url) as store:
        ids = named(store)
        assert {i.id for i in store.list_all(name="éclair über")} == {ids["Éclair ÜBER Plan"]}
        assert {i.id for i in store.list_all(name="мир")} == {ids["Мир СЕССИЯ"]}
        store.engine.dispose()


def expected(infos: list[SessionInfo], sort: str, reverse: bool) -> list[str]:
    """The order a plain sort gives: key direction per sort, missing keys last, ties by age."""
    value = {"modified": lambda i: i.modified, "created": lambda i: i.created, "name": lambda i: i.name,
             "cost": lambda i: i.cost}[sort]
    descending = (sort != "name") != reverse
    order = {info.id: n for n, info in enumerate(sorted(infos, key=lambda i: i.created or ""))}  # pk order
    present = [i for i in infos if value(i) is not None]
    missing = [i for i in infos if value(i) is None]
    present.sort(key=lambda i: (value(i), order[i.id]), reverse=descending)
    missing.sort(key=lambda i: order[i.id], reverse=descending)
    return [i.id for i in present + missing]


def pages(store: SessionStore, size: int, **options) -> list[list[SessionInfo]]:
    out, cursor = [], None
    while True:
        page = store.list_all(limit=size, cursor=cursor, **options)
        if not page:
            return out
        out.append(page)
        cursor = page[-1].cursor


@pytest.mark.sync_api_only("the listing query's sorts and pages, 16 times over (CI time): the async API's "
                            "list_all, pages included, is in the tests below")
@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("reverse", [False, True])
def test_pages_make_up_the_sorted_listing(store: SessionStore, sort: str, reverse: bool) -> None:
    populate(store)
    everything = store.list_all(sort=sort, reverse=reverse)
    assert [i.id for i in everything] == expected(everything, sort, reverse)
    for size in (1, 5, 12):
        got = [i.id for page in pages(store, size, sort=sort, reverse=reverse) for i in page]
        assert got == [i.id for i in everything]


def test_default_listing_is_unchanged(store: SessionStore) -> None:
    ids = populate(store)
    assert {i.id for i in store.list_all()} == set(ids)
    assert [i.id for i in store.list("/work/a")] == [i.id for i in store.list_all() if i.cwd == "/work/a"]
    info = store.find_by_id(ids[1])
    assert info is not None and info.cost == pytest.approx(0.1) and info.tokens == 116


def test_filters(store: SessionStore) -> None:
    ids = populate(store)
    assert {i.id for i in store.list_all(name="named c")} == {ids[9]}  # "Named C session", any case
    assert {i.id for i in store.list_all(name="NAMED")} == {ids[0], ids[3], ids[6], ids[9]}
    assert {i.id for i in store.list_all(model="m1")} == {ids[1], ids[7], ids[10]}
    assert {i.id for i in store.list_all(model="anthropic/m1")} == {ids[1], ids[7]}
    assert [i.id for i in store.list_all(model="openai/m1")] == [ids[10]]
    assert store.list_all(model="m9") == []
    assert store.list_all(name="100%_") == []  # LIKE wildcards are taken literally
    times = sorted(i.modified for i in store.list_all())
    from store.format.jsdate import parse_js_date
    middle = int(parse_js_date(times[6]))
    assert len(store.list_all(since_ms=middle)) + len(store.list_all(until_ms=middle)) == 12
    assert all(i.modified >= times[6] for i in store.list_all(since_ms=middle))
    assert [i.id for i in store.list("/work/b", sort="cost", model="m1", limit=5)] == [ids[7], ids[1], ids[10]]


def test_cost_sort_and_totals(store: SessionStore) -> None:
    ids = populate(store)
    listed = store.list_all(sort="cost")
    assert [i.cost for i in listed] == sorted((i.cost for i in listed), reverse=True)
    for info in listed:
        assert info.cost == pytest.approx(store.stats(info.id).cost)
    assert listed[-1].cost == 0 and {i.id for i in listed if i.cost == 0} >= {ids[0], ids[4], ids[8]}


def test_a_cursor_continues_exactly_after_writes(store: SessionStore) -> None:
    populate(store)
    first = store.list_all(limit=4)
    fresh = store.create("/work/new")
    fresh.append_message({"role": "user", "content": "newest", "timestamp": 1_800_000_000_000})
    rest = store.list_all(cursor=first[-1].cursor)
    assert fresh.get_session_id() not in {i.id for i in rest}  # it sorts before the cursor
    assert [i.id for i in first + rest] == [i.id for i in store.list_all() if i.id != fresh.get_session_id()]


def test_bad_cursors(store: SessionStore) -> None:
    populate(store)
    cursor = store.list_all(limit=2)[-1].cursor
    with pytest.raises(BadCursor):
        store.list_all(sort="name", cursor=cursor)
    with pytest.raises(BadCursor):
        store.list_all(cursor="not-a-cursor")


def test_first_page_reads_an_index_in_order(tmp_path) -> None:
    """SQLite plans the default first page as an index walk: no sort, no scan of entries."""
    with SessionStore.connect(f"sqlite:///{tmp_path / 'plan.db'}") as store:
        populate(store)
        statements: list[tuple[str, tuple]] = []

        def capture(conn, cursor, statement, parameters, context, executemany) -> None:
            statements.append((statement, parameters))

        event.listen(store.engine, "before_cursor_execute", capture)
        with read_transaction(store.engine) as conn:
            list_rows(conn, ListFilter(), limit=50)
        event.remove(store.engine, "before_cursor_execute", capture)
        # the first SELECT: the sessions that have a modified time
        statement, parameters = next((s, p) for s, p in statements if s.lstrip().upper().startswith("SELECT"))
        with store.engine.connect() as conn:
            plan = [row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)]
        assert any("USING INDEX ix_sessions_modified_ms" in step for step in plan), plan
        assert not any("TEMP B-TREE" in step or "entries" in step for step in plan), plan


@pytest.mark.sync_api_only("the CLI is the subject")
def test_cli_pages(store: SessionStore, db_url: str) -> None:
    ids = populate(store)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, "list", *args],
                              capture_output=True, text=True, timeout=120)

    plain = json.loads(cli("--json").stdout)
    assert isinstance(plain, list) and {s["id"] for s in plain} == set(ids)
    seen, cursor = [], None
    while True:
        done = cli("--json", "--limit", "5", *(["--cursor", cursor] if cursor else []))
        seen += [s["id"] for s in json.loads(done.stdout)]  # --json is a list, with --limit too
        cursor = done.stderr.removeprefix("more: --cursor ").strip() or None
        if cursor is None:
            break
    assert seen == [s["id"] for s in plain]
    by_cost = json.loads(cli("--json", "--sort", "cost", "--model", "anthropic/m1").stdout)
    assert [s["id"] for s in by_cost] and all(s["cost"] > 0 for s in by_cost)
    shown = cli("--limit", "3")
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 3 and "--cursor" in shown.stderr
    assert cli("--since", "not a date").returncode == 2
    assert cli("--since", "5").returncode == 2  # new Date("5") is 1 May 2001: typed dates are ISO only
    assert cli("--since", "2000-01-01 00:00", "--json").returncode == 0


@pytest.mark.sync_api_only("the CLI is the subject")
def test_cli_table_has_one_line_per_session(store: SessionStore, db_url: str) -> None:
    sm = store.create("/multi")
    sm.append_message({"role": "user", "content": "## Plan\n\n**Question**:\twhich queue?", "timestamp": 1})
    shown = subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, "list", "--cwd", "/multi"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [shown.stdout.rstrip("\n")]
    assert shown.stdout.rstrip().endswith("## Plan **Question**: which queue?")
