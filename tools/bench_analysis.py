#!/usr/bin/env python3
"""Analysis benchmarks at scale: listing, full-text search and the documented views over 10,000
sessions / 1,000,000 entries, against Pi listing the same sessions as JSONL in the same run.

    python tools/bench_analysis.py [--sessions 10000] [--entries 1000000] [--db URL] [--out DIR] [--reps 15]

1. Generates the sessions as Pi's files (``DIR/sessions/*.jsonl``, deterministic: seeded): turns of
   user / assistant (thinking, tool calls, usage) / tool results, branches left behind, some
   compactions, labels and names, words drawn Zipf-like from a 20,000-word vocabulary, one word
   unique to each session.
2. Imports them (``SessionStore.import_path``), then brings the SQLite search index up to date
   (``pi-store fts sync``: the time is reported; PostgreSQL indexes while importing). The import's
   MB/s is reported against the raw SQLite baseline's import of the same files, run just before
   (``tools/bench_pg_import.py``, which also compares the engines round by round).
3. Times (median of ``--reps``): the first page of ``list`` in each sort order, a filtered page,
   a deep page by cursor; searches (a word of one session, a middling and the most common word, a
   phrase, a prefix, one session's, path-only); the first page (``LIMIT 100``) of every view;
   the queries of ``docs/sql.md``; ``stats --by`` each grouping, of all sessions and of one, as a
   ratio to plain ``stats`` of the same sessions in the same run (``vs_stats``), without a window
   (the totals kept per day, ``activity_days``) and with one that keeps every row (``--since``
   the epoch: the ``activity`` view's rows, what every grouping read before migration 0012).
4. Baseline: ``SessionManager.listAll(DIR)`` of the real Pi over the same files (through
   ``../shared/oracle/run.sh``; reported missing when the oracle is not installed): the ratio is
   Pi's time over ours. Pi has no search: listing is how ``/resume`` finds a session by its text.
5. Sizes: the database, the full-text index (``dbstat`` on SQLite, ``pg_relation_size`` on
   PostgreSQL) as a fraction of it, and the searchable text stored in ``entries.search_text``.

Prints one JSON object per measurement and a Markdown table at the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import orjson
from bench_pg_import import raw_baseline
from benchmarking import ORACLE_RUN, RESULTS, ROOT, SHARED, median_ms, record
from sqlalchemy import text

from store.analysis import VIEWS, fts
from store.analysis.breakdown import BY, breakdown
from store.analysis.readonly import run_sql
from store.db.engine import is_sqlite, read_transaction
from store.session_store import SessionStore

PI_BASELINE = SHARED / "baselines" / "pi_baseline.mjs"
MODELS = [("anthropic", "claude-sonnet-4-5", 3e-6, 15e-6), ("anthropic", "claude-opus-4-1", 15e-6, 75e-6),
          ("openai", "gpt-5", 1.25e-6, 10e-6), ("google", "gemini-2.5-pro", 1.25e-6, 10e-6),
          ("openrouter", "qwen/qwen3-coder", 0.4e-6, 1.6e-6)]
TOOLS = ("read", "edit", "write", "bash", "grep")


# ---------------------------------------------------------------------------------------------
# generating Pi's files


class Writer:
    """Sessions as Pi writes them, from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "xe", "za", "bri", "dro", "fla", "gre", "plu"]
        self.vocabulary = sorted({"".join(self.rng.choices(syllables, k=self.rng.randint(2, 4)))
                                  for _ in range(40_000)})[:20_000]
        self.rng.shuffle(self.vocabulary)
        self.cum_weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(self.vocabulary))))
        self.clock = 1_767_225_600_000

    def words(self, count: int) -> str:
        return " ".join(self.rng.choices(self.vocabulary, cum_weights=self.cum_weights, k=count))

    def session(self, index: int, entries: int, directory: Path) -> int:
        rng = self.rng
        self.clock += rng.randint(60_000, 3_600_000)
        ms = self.clock
        session_id = f"019b{index:08x}-0000-7000-8000-{rng.getrandbits(48):012x}"
        stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(ms / 1000))
        provider, model, price_in, price_out = MODELS[index % len(MODELS)]
        lines = [{"type": "session", "version": 3, "id": session_id, "timestamp": iso(ms),
                  "cwd": f"/home/dev/project-{index % 40}"}]
        parent = None
        ids: list[str] = []

        def add(entry: dict) -> None:
            nonlocal parent, ms
            ms += rng.randint(500, 20_000)
            entry_id = f"{rng.getrandbits(32):08x}"
            lines.append({"type": entry["type"], "id": entry_id, "parentId": parent, "timestamp": iso(ms),
                          **{k: v for k, v in entry.items() if k != "type"}})
            parent = entry_id
            ids.append(entry_id)

        add({"type": "model_change", "provider": provider, "modelId": model})
        turn = 0
        while len(lines) < entries:
            words = self.words(rng.randint(8, 40))
            if turn == 0:
                words += f" unique{index}word"
            add({"type": "message", "message": {"role": "user", "content": words, "timestamp": ms}})
            for _ in range(rng.randint(1, 3)):
                tool = rng.choice(TOOLS)
                call_id = f"toolu_{rng.getrandbits(40):010x}"
                arguments = ({"command": self.words(4)} if tool == "bash"
                             else {"path": f"src/{self.words(1)}/{self.words(1)}.py"})
                add({"type": "message", "message": assistant(
                    provider, model, price_in, price_out, rng, ms, thinking=self.words(rng.randint(5, 30)),
                    text=None, call=(call_id, tool, arguments))})
                add({"type": "message", "message": {
                    "role": "toolResult", "toolCallId": call_id, "toolName": tool,
                    "content": [{"type": "text", "text": self.words(rng.randint(10, 80))}],
                    "isError": rng.random() < 0.05, "timestamp": ms}})
            add({"type": "message", "message": assistant(provider, model, price_in, price_out, rng, ms, thinking=None,
                                                         text=self.words(rng.randint(10, 60)), call=None)})
            turn += 1
            if rng.random() < 0.08 and len(ids) > 6:  # leave a branch behind
                parent = ids[rng.randrange(len(ids) - 4)]
            if rng.random() < 0.03 and len(ids) > 10:
                add({"type": "compaction", "summary": self.words(60), "firstKeptEntryId": ids[-4],
                     "tokensBefore": rng.randint(50_000, 150_000)})
            if rng.random() < 0.02:
                add({"type": "label", "targetId": ids[rng.randrange(len(ids))], "label": self.words(2)})
        if index % 3 == 0:
            add({"type": "session_info", "name": self.words(3)})
        path = directory / f"{stamp}_{session_id}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))
        return len(lines) - 1


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def assistant(provider: str, model: str, price_in: float, price_out: float, rng: random.Random, ms: int,
              thinking: str | None, text: str | None, call: tuple | None) -> dict:
    content: list[dict] = []
    if thinking:
        content.append({"type": "thinking", "thinking": thinking})
    if text:
        content.append({"type": "text", "text": text})
    if call:
        content.append({"type": "toolCall", "id": call[0], "name": call[1], "arguments": call[2]})
    tokens_in, tokens_out, cached = rng.randint(500, 20_000), rng.randint(20, 2_000), rng.randint(0, 50_000)
    cost_in, cost_out, cost_cache = tokens_in * price_in, tokens_out * price_out, cached * price_in / 10
    return {"role": "assistant", "content": content, "api": "messages", "provider": provider, "model": model,
            "usage": {"input": tokens_in, "output": tokens_out, "cacheRead": cached, "cacheWrite": 0,
                      "totalTokens": tokens_in + tokens_out + cached,
                      "cost": {"input": cost_in, "output": cost_out, "cacheRead": cost_cache, "cacheWrite": 0,
                               "total": cost_in + cost_out + cost_cache}},
            "stopReason": "toolUse" if call else "stop", "timestamp": ms}


def generate(directory: Path, sessions: int, entries: int, seed: int) -> tuple[int, int]:
    directory.mkdir(parents=True, exist_ok=True)
    writer = Writer(seed)
    total = 0
    for index in range(sessions):
        left = sessions - index
        total += writer.session(index, max(8, (entries - total) // left), directory)
    return total, sum(p.stat().st_size for p in directory.iterdir())


# ---------------------------------------------------------------------------------------------
# measuring


def pi_list_ms(directory: Path) -> dict | None:
    if not ORACLE_RUN.exists():
        return None
    env = {**os.environ, "PI_ORACLE_DIR": os.environ.get("PI_ORACLE_DIR", str(Path.home() / ".cache/pi-oracle"))}
    try:
        out = subprocess.run([str(ORACLE_RUN), str(PI_BASELINE), "list", str(directory)], capture_output=True,
                             text=True, check=True, timeout=3600, env=env).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, FileNotFoundError) as exc:
        print(f"Pi baseline failed: {exc}", file=sys.stderr)
        return None
    return json.loads(out.strip().splitlines()[-1])


def sizes(store: SessionStore) -> dict:
    with read_transaction(store.engine) as conn:
        text_bytes = conn.execute(text(
            "SELECT sum(length(CAST(search_text AS BLOB))) FROM entries" if is_sqlite(conn)
            else "SELECT sum(octet_length(search_text)) FROM entries")).scalar()
        if is_sqlite(conn):
            total = conn.execute(text("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
                                 ).scalar()
            index = conn.execute(text("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'entries_fts%'")).scalar()
        else:
            total = conn.execute(text("SELECT pg_database_size(current_database())")).scalar()
            index = conn.execute(text("SELECT pg_relation_size('ix_entries_search_words')")).scalar()
    return {"db_mb": total / 1e6, "fts_index_mb": index / 1e6, "fts_fraction": index / total,
            "search_text_mb": text_bytes / 1e6, "search_text_fraction": text_bytes / total}


_EVER = "1970-01-01T00:00:00.000Z"


def words_by_rank(store: SessionStore, writer: Writer) -> dict[str, str]:
    return {"rare (one session)": "unique4321word", "middling (rank 2000)": writer.vocabulary[2000],
            "most common": writer.vocabulary[0], "phrase": f'"{writer.vocabulary[0]} {writer.vocabulary[1]}"',
            "prefix": writer.vocabulary[50][:3] + "*", "two words": f"{writer.vocabulary[3]} {writer.vocabulary[700]}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--db", help="database URL (default: a SQLite file in --out)")
    parser.add_argument("--out", type=Path, default=Path("bench-analysis"))
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-pi", action="store_true", help="do not run Pi's listAll baseline")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    directory = args.out / "sessions"

    start = time.perf_counter()
    if not directory.is_dir() or len(list(directory.glob("*.jsonl"))) != args.sessions:
        entries, size = generate(directory, args.sessions, args.entries, args.seed)
    else:
        entries, size = None, sum(p.stat().st_size for p in directory.iterdir())
    record(op="generate", sessions=args.sessions, entries=entries, mb=size / 1e6, s=time.perf_counter() - start)
    writer = Writer(args.seed)

    url = args.db or f"sqlite:///{(args.out / 'analysis.db').resolve()}"
    store = SessionStore.connect(url)
    with read_transaction(store.engine) as conn:
        stored = conn.execute(text("SELECT count(*) FROM sessions")).scalar()
    if stored != args.sessions:
        raw = raw_baseline(directory)  # the raw SQLite baseline over the same files, just before
        start = time.perf_counter()
        reports = store.import_path(directory)
        seconds = time.perf_counter() - start
        record(op="import", files=len(reports), s=seconds, mb_per_s=size / 1e6 / seconds,
               raw_sqlite_mb_per_s=raw and size / 1e6 / raw["s"], vs_raw_sqlite=raw and raw["s"] / seconds)
    start = time.perf_counter()
    indexed = fts.sync(store.engine)
    record(op="fts sync after import", rows=indexed, s=time.perf_counter() - start)
    if not is_sqlite(store.engine):  # what autovacuum does after a bulk load: statistics, visibility map
        start = time.perf_counter()
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
        record(op="VACUUM ANALYZE after import", s=time.perf_counter() - start)
    with read_transaction(store.engine) as conn:
        counts = conn.execute(text("SELECT count(*), sum(CASE WHEN kind = 'entry' THEN 1 ELSE 0 END) FROM entries"
                                   )).one()
    record(op="stored", sessions=args.sessions, rows=counts[0], entries=counts[1], **sizes(store))

    pi = None if args.skip_pi else pi_list_ms(directory)
    pi_ms = pi and pi.get("ms")
    record(op="Pi SessionManager.listAll (JSONL)", ms=pi_ms, sessions=pi and pi.get("sessions"))

    first = store.list_all(limit=50)
    deep = store.list_all(limit=50 * 100)[-1].cursor
    listings = {
        "list first page (50, modified)": lambda: store.list_all(limit=50),
        "list first page (created)": lambda: store.list_all(limit=50, sort="created"),
        "list first page (name)": lambda: store.list_all(limit=50, sort="name"),
        "list first page (cost)": lambda: store.list_all(limit=50, sort="cost"),
        "list page after 5,000 (cursor)": lambda: store.list_all(limit=50, cursor=deep),
        "list, one cwd": lambda: store.list("/home/dev/project-7", limit=50),
        "list, --model": lambda: store.list_all(limit=50, model="gpt-5"),
        "list, --name": lambda: store.list_all(limit=50, name=writer.vocabulary[5]),
    }
    assert len(first) == 50
    for name, fn in listings.items():
        ms = median_ms(fn, args.reps)
        record(op=name, ms=ms, pi_list_ms=pi_ms, vs_pi=pi_ms and pi_ms / ms)

    session = first[7].id
    for label, query in words_by_rank(store, writer).items():
        hits = len(store.search(query))
        ms = median_ms(lambda q=query: store.search(q), args.reps)
        record(op=f"search: {label}", query=query, hits=hits, ms=ms, pi_list_ms=pi_ms, vs_pi=pi_ms and pi_ms / ms)
    for label, options in (("one session", {"session": session}), ("path only", {"path_only": True}),
                           ("role assistant", {"role": "assistant"})):
        ms = median_ms(lambda o=options: store.search(writer.vocabulary[10], **o), args.reps)
        record(op=f"search: common word, {label}", ms=ms, pi_list_ms=pi_ms, vs_pi=pi_ms and pi_ms / ms)

    for view in VIEWS:
        sql = f"SELECT * FROM {view} LIMIT 100"
        ms = median_ms(lambda s=sql: run_sql(store.engine, s), max(3, args.reps // 5))
        record(op=f"view first page {view}", ms=ms)
    doc = (ROOT / "docs" / "sql.md").read_text("utf-8").split("## Ten queries", 1)[1].split("\n## ", 1)[0]
    for title, sql in re.findall(r"### (.+?)\n.*?```sql\n(.*?)```", doc, flags=re.S):
        ms = median_ms(lambda s=sql: run_sql(store.engine, s), max(3, args.reps // 5))
        record(op=f"docs query {title}", ms=ms)
    # stats --by against the baseline of the same run: plain stats (totals of the same rows)
    reps = max(3, args.reps // 5)
    for label, only in (("all sessions", None), ("one session", session)):
        baseline = median_ms(lambda o=only: store.stats(o), reps)
        record(op=f"stats, {label} (baseline)", ms=baseline)
        for by in BY:
            ms = median_ms(lambda b=by, o=only: breakdown(store.engine, b, o), reps)
            record(op=f"stats --by {by}, {label}", ms=ms, vs_stats=ms / baseline)
            if by != "tool":  # a window that keeps every row: the activity view's rows, not the kept totals
                ms = median_ms(lambda b=by, o=only: breakdown(store.engine, b, o, since=_EVER), reps)
                record(op=f"stats --by {by} --since {_EVER}, {label}", ms=ms, vs_stats=ms / baseline)
    store.close()

    print("\n| measurement | ours | Pi listAll, same run | ratio (Pi / ours) |\n|---|---|---|---|")
    for r in RESULTS:
        if "ms" in r and r["op"] != "Pi SessionManager.listAll (JSONL)":
            ratio = f"{r['vs_pi']:.0f}x" if r.get("vs_pi") else ""
            pi_text = f"{r['pi_list_ms']:.0f} ms" if r.get("pi_list_ms") else ""
            print(f"| {r['op']} | {r['ms']:.2f} ms | {pi_text} | {ratio} |")


if __name__ == "__main__":
    main()
