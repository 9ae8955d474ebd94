#!/usr/bin/env python3
"""Where a store's bytes go: database bytes / JSONL bytes, per table and index, per column.

    python tools/bench_storage.py [--input NAME=PATH ...] [--preset pi-written|linear|bench|corpus ...]
                                  [--pg URL] [--out DIR]

Each input (a JSONL file or a directory of them) is imported into a fresh SQLite database (and,
with ``--pg``, a fresh PostgreSQL database made next to the one the URL names), the SQLite search
index brought up to date (``fts.sync``) and the WAL checkpointed. Reported per input and engine:

* ``ratio``: database bytes (SQLite: pages in use, free pages left out; PostgreSQL:
  ``pg_total_relation_size`` of every table of the store) over the JSONL bytes;
* per table / index: SQLite ``dbstat`` (pages × page size), PostgreSQL ``pg_relation_size``
  (heap, TOAST and each index apart);
* per column of ``entries``: ``sum(length(col))`` on SQLite (the payload bytes, before record
  headers and page overhead), ``sum(pg_column_size(col))`` on PostgreSQL (as stored: compressed
  when TOASTed).

Presets: ``pi-written`` (the oracle's ``gen.mjs --seed 1 --size large``, Pi's own 11.8 MB
session), ``linear`` (``make_linear_session.py 10000``), ``bench`` (the 1/10-scale store of
``bench_analysis.py``: 1,000 sessions / 100k entries), ``corpus`` (``$PI_STORE_SHARED/corpus``,
read in place). Prints one JSON object per measurement and a Markdown summary at the end.

``--what-if`` (SQLite) measures each storage idea on a copy of the database, every copy
``VACUUM``ed so that they compare with the vacuumed original: ``search_text`` emptied with the
full-text index kept (what a contentless FTS5 table would store), ``facts`` without ``toolCalls``,
8 and 16 KiB pages, all three together, and ``raw`` compressed with zlib (level 6; an estimate
from the compressed lengths, nothing rewritten).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

from benchmarking import BASELINES, ORACLE_RUN, SHARED, record
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from store.analysis import fts
from store.db.engine import is_sqlite, read_transaction
from store.session_store import SessionStore

TOP = 12  # tables / indexes listed per input


def jsonl_bytes(path: Path) -> int:
    files = [path] if path.is_file() else sorted(path.rglob("*.jsonl"))
    return sum(p.stat().st_size for p in files)


def preset(name: str, out: Path) -> Path:
    """The input a preset names, made under ``out`` when it is generated."""
    if name == "pi-written":
        target = out / "gen" / "large-seed1-0.jsonl"
        if not target.exists():
            subprocess.run(
                [str(ORACLE_RUN), "gen.mjs", "--seed", "1", "--size", "large", "--out", str(target.parent)],
                check=True,
                capture_output=True,
            )
        return target
    if name == "linear":
        target = out / "linear-10000.jsonl"
        if not target.exists():
            script = BASELINES / "make_linear_session.py"
            subprocess.run([sys.executable, str(script), "10000", str(target)], check=True)
        return target
    if name == "bench":
        from bench_analysis import generate

        target = out / "bench-sessions"
        if not target.is_dir() or len(list(target.glob("*.jsonl"))) != 1000:
            generate(target, 1000, 100_000, 7)
        return target
    if name == "corpus":
        return SHARED / "corpus"
    raise SystemExit(f"unknown preset {name!r}")


def sqlite_breakdown(store: SessionStore) -> dict:
    with read_transaction(store.engine) as conn:
        page = conn.execute(text("PRAGMA page_size")).scalar_one()
        pages = conn.execute(text("PRAGMA page_count")).scalar_one()
        free = conn.execute(text("PRAGMA freelist_count")).scalar_one()
        objects = dict(conn.execute(text("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")).all())
        columns = [c["name"] for c in conn.execute(text("PRAGMA table_info(entries)")).mappings()]
        sums = conn.execute(
            text("SELECT " + ", ".join(f"coalesce(sum(length({c})), 0)" for c in columns) + " FROM entries")
        ).one()
    return {"bytes": (pages - free) * page, "objects": objects, "columns": dict(zip(columns, sums, strict=True))}


def pg_breakdown(store: SessionStore) -> dict:
    with read_transaction(store.engine) as conn:
        tables = conn.execute(
            text(
                "SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
            )
        ).all()
        total, objects = 0, {}
        for oid, name in tables:
            total += conn.execute(text("SELECT pg_total_relation_size(:o)"), {"o": oid}).scalar_one()
            objects[name] = conn.execute(text("SELECT pg_relation_size(:o)"), {"o": oid}).scalar_one()
            toast = conn.execute(text("SELECT reltoastrelid FROM pg_class WHERE oid = :o"), {"o": oid}).scalar_one()
            if toast:
                objects[f"{name} (TOAST)"] = conn.execute(
                    text("SELECT pg_total_relation_size(:o)"), {"o": toast}
                ).scalar_one()
            for index, size in conn.execute(
                text(
                    "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = :o"
                ),
                {"o": oid},
            ):
                objects[index] = size
        columns = [
            r[0]
            for r in conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                    "AND table_name = 'entries' ORDER BY ordinal_position"
                )
            )
        ]
        sums = conn.execute(
            text("SELECT " + ", ".join(f"coalesce(sum(pg_column_size({c})), 0)" for c in columns) + " FROM entries")
        ).one()
    return {"bytes": total, "objects": objects, "columns": dict(zip(columns, sums, strict=True))}


WHAT_IF = {  # name: (page size, statements run on the copy before VACUUM)
    "vacuumed as is": (None, []),
    "no search_text (FTS index kept)": (
        None,
        ["DROP TRIGGER entries_fts_update", "UPDATE entries SET search_text = ''"],
    ),
    "facts without toolCalls": (
        None,
        ["UPDATE entries SET facts = json_remove(facts, '$.toolCalls') WHERE facts LIKE '%\"toolCalls\"%'"],
    ),
    "8 KiB pages": (8192, []),
    "16 KiB pages": (16384, []),
}
WHAT_IF["all three (16 KiB)"] = (
    16384,
    WHAT_IF["no search_text (FTS index kept)"][1] + WHAT_IF["facts without toolCalls"][1],
)


def used_bytes(conn: sqlite3.Connection) -> int:
    return conn.execute(
        "SELECT (page_count - freelist_count) * page_size "
        "FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()"
    ).fetchone()[0]


def what_if(name: str, db: Path, jsonl: int) -> None:
    """Each idea of ``WHAT_IF`` on a copy of the SQLite database ``db``, and compressed ``raw``."""
    copy = db.with_suffix(".what-if.db")
    for idea, (page_size, statements) in WHAT_IF.items():
        shutil.copy(db, copy)
        conn = sqlite3.connect(copy, isolation_level=None)
        conn.execute("PRAGMA journal_mode=DELETE")  # (page size changes need a rollback journal)
        for statement in statements:
            conn.execute(statement)
        if page_size:
            conn.execute(f"PRAGMA page_size={page_size}")
        conn.execute("VACUUM")
        size = used_bytes(conn)
        conn.close()
        record(input=name, engine="sqlite", what_if=idea, db_mb=round(size / 1e6, 2), ratio=round(size / jsonl, 3))
    copy.unlink()
    conn = sqlite3.connect(db)
    stored = compressed = 0
    for (raw,) in conn.execute("SELECT raw FROM entries WHERE raw IS NOT NULL"):
        stored, compressed = stored + len(raw), compressed + len(zlib.compress(raw, 6))
    conn.close()
    record(
        input=name,
        engine="sqlite",
        what_if="raw compressed (zlib 6, estimate)",
        raw_mb=round(stored / 1e6, 2),
        saved_mb=round((stored - compressed) / 1e6, 2),
    )


def scratch_pg(url: str, name: str) -> str:
    """A fresh database ``name`` on the server of ``url`` (dropped first if it exists)."""
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def measure(name: str, source: Path, url: str, engine_name: str) -> dict:
    size = jsonl_bytes(source)
    with SessionStore.connect(url) as store:
        store.import_path(source)
        fts.sync(store.engine)
        if is_sqlite(store.engine):
            with store.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            found = sqlite_breakdown(store)
        else:
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))
            found = pg_breakdown(store)
    objects = sorted(found["objects"].items(), key=lambda item: -item[1])
    return record(
        input=name,
        engine=engine_name,
        jsonl_mb=round(size / 1e6, 2),
        db_mb=round(found["bytes"] / 1e6, 2),
        ratio=round(found["bytes"] / size, 3),
        objects_mb={k: round(v / 1e6, 2) for k, v in objects[:TOP]},
        columns_mb={k: round(v / 1e6, 2) for k, v in found["columns"].items() if v >= 10_000},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a JSONL file or a directory of them (repeatable)",
    )
    parser.add_argument("--preset", action="append", default=[], choices=("pi-written", "linear", "bench", "corpus"))
    parser.add_argument("--pg", metavar="URL", help="also measure PostgreSQL (scratch databases on this server)")
    parser.add_argument("--out", type=Path, default=Path("bench-storage"))
    parser.add_argument("--what-if", action="store_true", help="measure each storage idea on a copy (SQLite)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    inputs = [(name, preset(name, args.out)) for name in args.preset]
    inputs += [(spec.split("=", 1)[0], Path(spec.split("=", 1)[1])) for spec in args.input]
    rows = []
    for name, source in inputs:
        db = args.out / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        rows.append(measure(name, source, f"sqlite:///{db.resolve()}", "sqlite"))
        if args.what_if:
            what_if(name, db, jsonl_bytes(source))
        if args.pg:
            rows.append(
                measure(name, source, scratch_pg(args.pg, f"bench_storage_{name.replace('-', '_')}"), "postgresql")
            )
    print("\n| input | engine | JSONL MB | database MB | ratio |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['input']} | {r['engine']} | {r['jsonl_mb']} | {r['db_mb']} | {r['ratio']:.2f}× |")


if __name__ == "__main__":
    main()
