"""Random operation scripts against the real Pi, on SQLite and PostgreSQL: the same
SessionManager calls must give the same files, return values and errors.

    python tools/api_differential.py --count 2000 --seed 1 [--min-ops 20] [--max-ops 400]
        [--pg-url URL | --no-pg] [--failures DIR]

Script ``i`` is ``generate(seed + i, ...)`` (tests/apidiff/generate.py). Each script runs on the
live Pi (tests/apidiff/pi_runner.mjs, one Node process per chunk) and on our store; the outcome
(every op's return value or error, the session snapshots, the exported files) must be equal
byte for byte. The first difference of each differing script is printed, the script written to
``--failures`` when given; the last line is ``api-differential: M/N identical`` (M: identical on
every engine). Exit status 0 only when all N are identical.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from store.db.engine import ensure_schema, make_engine
from tests.apidiff.generate import generate, generator_engine
from tests.apidiff.pi import run_on_pi
from tests.apidiff.script import dump_script, first_difference, run_script
from tests.oracle_support import ORACLE_SKIP_REASON, oracle_available

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CHUNK = 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-ops", type=int, default=20)
    parser.add_argument("--max-ops", type=int, default=400)
    parser.add_argument("--pg-url", default=PG_URL, help="PostgreSQL server (a scratch database is made beside it)")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--failures", type=Path, help="write each differing script here as <name>.json")
    args = parser.parse_args(argv)
    if not oracle_available():
        print(f"api-differential: {ORACLE_SKIP_REASON}", file=sys.stderr)
        return 2
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="apidiff-", dir=shm if shm.is_dir() else None) as tmp:
        engines = {"sqlite": make_engine(f"sqlite:///{tmp}/store.db")}
        pg_name = None
        if not args.no_pg:
            pg_name = f"apidiff_{uuid.uuid4().hex[:10]}"
            admin = create_engine(args.pg_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{pg_name}"'))
                # a scratch database: no need to wait for the disk at each commit
                conn.execute(text(f'ALTER DATABASE "{pg_name}" SET synchronous_commit = off'))
            engines["postgresql"] = make_engine(make_url(args.pg_url).set(database=pg_name).render_as_string(False))
        try:
            identical = run(args, engines)
        finally:
            for engine in engines.values():
                engine.dispose()
            if pg_name is not None:
                with admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)'))
                admin.dispose()
    print(f"api-differential: {identical}/{args.count} identical")
    return 0 if identical == args.count else 1


def run(args: argparse.Namespace, engines: dict) -> int:
    for engine in engines.values():
        ensure_schema(engine)
    gen_engine = generator_engine()
    identical = ops = 0
    for start in range(args.seed, args.seed + args.count, CHUNK):
        seeds = range(start, min(start + CHUNK, args.seed + args.count))
        scripts = [generate(s, args.min_ops, args.max_ops, gen_engine) for s in seeds]
        ops += sum(len(s["ops"]) for s in scripts)
        for script, pi in zip(scripts, run_on_pi(scripts), strict=True):
            problems = [f"{name}: {diff}" for name, engine in engines.items()
                        if (diff := first_difference(pi, run_script(engine, script), script))]
            if not problems:
                identical += 1
                continue
            print(f"{script['name']}: " + "\n    ".join(problems), flush=True)
            if args.failures:
                args.failures.mkdir(parents=True, exist_ok=True)
                (args.failures / f"{script['name']}.json").write_text(dump_script(script) + "\n", "utf-8")
        print(f"... {seeds[-1] - args.seed + 1}/{args.count} scripts, {ops} ops, {identical} identical",
              file=sys.stderr, flush=True)
    return identical


if __name__ == "__main__":
    sys.exit(main())
