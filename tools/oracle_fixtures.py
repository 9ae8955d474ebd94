#!/usr/bin/env python3
"""Regenerate the golden Pi-oracle fixtures in tests/fixtures/oracle.

Runs the real Pi (../shared/oracle, installed in $PI_ORACLE_DIR or ~/.cache/pi-oracle by
../shared/oracle/setup.sh) and writes:

* sessions/<name>.jsonl     session files written by Pi itself: `gen.mjs --seed N --size small`
                            (seeds --small-seeds), `--size medium` (seeds --medium-seeds), and every
                            `gen.mjs --legacy` file (hand-written legacy/edge cases);
* describe/<name>.json.gz   describe.mjs's output for each of them, byte for byte, gzip (mtime 0,
                            level 9, so reruns are byte-stable);
* corpus/<name>.json.gz     for each ../shared/corpus/pi-sessions/<name>.jsonl: a REDUCED describe
                            document with no corpus text (the corpus files have various licences
                            and are never copied here): tests.oracle_support.reduce_for_corpus()
                            of describe.mjs's document, JSON (ASCII, compact, key order kept), gzip;
* describe/<name>.json.gz   also for each crafted/<name>.jsonl: session files written by hand (in
                            this repository) for a behaviour Pi's generator never writes;
* MANIFEST.json             how each fixture was made: kind (gen-small / gen-medium / legacy /
                            corpus / crafted), source sha256 and size, describe flags, gen arguments,
                            sha256 of gen.mjs / lib.mjs / describe.mjs, Pi and Node versions.

describe.mjs gets --all-leaves when the file has fewer than 700 "\\n" and fewer than 512 KiB
(the rule of ../shared/conformance/conformance.py).

Corpus reduction (tests apply the same function, tests/oracle_support.py reduce_for_corpus, to
the store's own inspect output before comparing): H(s) = sha256 hex of
s.encode("utf-8", "surrogatepass"); null stays null; a list of strings L -> H("\\n".join(L));
every {"$error": {name, message}} -> {"$error": {name, message: H(message)}}. Kept: describeFormat,
piVersion, file, inputSha256, inputBytes, openError, rawParse, leafId, branchIds,
contextEntryIds, latestCompactionId, estimateProjectedContextTokens, estimateContextTokens,
messageTokenEstimates, shouldCompact. sessionName -> H. tree nodes keep id, treeParentId, depth,
type, labelTimestamp, children, and label -> H. listInfo keeps id, created, modified,
messageCount; cwd, name, parentSessionPath, firstMessage, allMessagesText -> H.
prepareCompaction summaries (and allLeaves[i].prepareCompaction500) keep firstKeptEntryId,
isSplitTurn, tokensBefore, messagesToSummarize, turnPrefixMessages, settings; previousSummary ->
H; fileOps.read/edited/written, readFiles, modifiedFiles -> H(list). fileAfterOpen -> {changed,
content: H(content) or null}. header and entries[i] -> {id, parentId, type} (keys present only;
a non-object line -> {jsonType}). allLeaves[i] keeps leafId, pathIds, contextEntryIds,
estimateProjectedContextTokens, prepareCompaction500. Everything else (sessionContext,
projection, full entries) is dropped.

Everything under sessions/, describe/ and corpus/ that this run does not produce is deleted, so
the directory always matches MANIFEST.json. At most --jobs (default 2) oracle processes run at
once. Exit status: 0 done, 1 an oracle run failed or disagreed with itself, 2 no oracle.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import gzip
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests import oracle_support as osup  # noqa: E402

DEFAULT_SMALL = "1-40"
DEFAULT_MEDIUM = "1-3"
KIND_DIRS = ("sessions", "describe", "corpus")
CRAFTED_DIR = "crafted"  # session files written by hand for one behaviour each: sources, never deleted


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def parse_seeds(text: str) -> list[int]:
    """"1-40", "5", "1-3,7" or "none"."""
    if text.strip().lower() in ("", "none"):
        return []
    seeds: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise argparse.ArgumentTypeError(f"not a seed range: {part!r} (use A-B, N, A-B,N or none)")
        seeds += [s for s in range(int(match[1]), int(match[2] or match[1]) + 1) if s not in seeds]
    return seeds


def format_seeds(seeds: list[int]) -> str:
    """The inverse of parse_seeds: [1, 2, 3, 7] -> "1-3,7"."""
    parts: list[str] = []
    start = prev = None
    for seed in [*seeds, None]:
        if start is not None and (seed is None or seed != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if seed is not None and start is None:
            start = seed
        prev = seed
    return ",".join(parts) or "none"


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def write_if_changed(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)


def oracle_errors(value: Any, path: str = "$") -> list[tuple[str, str]]:
    """(field path with array indexes folded to [*], error name) of every {"$error"} in a document."""
    if osup.is_oracle_error(value):
        error = value["$error"]
        return [(path, error.get("name", "?") if isinstance(error, dict) else "?")]
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += oracle_errors(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            found += oracle_errors(item, f"{path}[*]")
    return found


def summarize_errors(doc: dict[str, Any]) -> dict[str, Any]:
    """{path: "Name xCOUNT"} in first-seen order."""
    counts: dict[tuple[str, str], int] = {}
    for item in oracle_errors(doc):
        counts[item] = counts.get(item, 0) + 1
    return {path: f"{name} x{n}" if n > 1 else name for (path, name), n in counts.items()}


def installed_pi_version() -> str:
    return json.loads(osup.PI_PACKAGE_JSON.read_text("utf-8")).get("version", "unknown")


def gen_one(seed: int, size: str, scratch: Path) -> list[Path]:
    return [osup.run_gen(seed, size, scratch)]


def pmap(jobs: int, work: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(work, items))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Regenerate tests/fixtures/oracle (golden outputs of the real Pi oracle).",
        epilog="Example: python tools/oracle_fixtures.py --small-seeds 1-40 --medium-seeds 1-3 --jobs 2")
    parser.add_argument("--small-seeds", type=parse_seeds, default=parse_seeds(DEFAULT_SMALL),
                        metavar="RANGE",
                        help=f"gen.mjs --size small seeds: 1-40, 1-3,7 or none (default {DEFAULT_SMALL})")
    parser.add_argument("--medium-seeds", type=parse_seeds, default=parse_seeds(DEFAULT_MEDIUM),
                        metavar="RANGE", help=f"gen.mjs --size medium seeds (default {DEFAULT_MEDIUM})")
    parser.add_argument("--corpus-dir", type=Path, default=osup.CORPUS_DIR,
                        help="real Pi sessions to describe (reduced; default ../shared/corpus/pi-sessions)")
    parser.add_argument("--out", type=Path, default=osup.FIXTURES,
                        help="fixture folder (default tests/fixtures/oracle)")
    parser.add_argument("--jobs", type=int, default=2, help="oracle processes at once (default 2)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the scratch files (generated sessions) in this folder")
    args = parser.parse_args(argv)

    if not osup.oracle_available():
        log(f"error: {osup.ORACLE_SKIP_REASON}")
        return 2
    out: Path = args.out
    work = Path(tempfile.mkdtemp(prefix="oracle-fixtures-")) if args.work is None else args.work
    work.mkdir(parents=True, exist_ok=True)
    oracle = {
        "piVersion": installed_pi_version(),
        "node": osup.node_version(),
        "oracleDir": "../shared/oracle",
        "genMjsSha256": osup.sha256_file(osup.ORACLE_SRC / "gen.mjs"),
        "libMjsSha256": osup.sha256_file(osup.ORACLE_SRC / "lib.mjs"),
        "describeMjsSha256": osup.sha256_file(osup.ORACLE_SRC / "describe.mjs"),
        "allLeavesRule": f"--all-leaves when the file has < {osup.ALL_LEAVES_MAX_LINES} '\\n' and "
                         f"< {osup.ALL_LEAVES_MAX_BYTES} bytes",
    }
    small, medium = args.small_seeds, args.medium_seeds
    log(f"oracle: Pi {oracle['piVersion']}, Node {oracle['node']}; work dir {work}")

    # 1. generate (each gen.mjs run is one Node process)
    gen_jobs: list[tuple[str, list[str], Callable[[], list[Path]]]] = []
    for size, seeds in (("small", small), ("medium", medium)):
        for seed in seeds:
            gen_args = ["--seed", str(seed), "--size", size, "--count", "1"]
            scratch = work / "gen" / f"{size}-seed{seed}"
            gen_jobs.append((f"gen-{size}", gen_args, functools.partial(gen_one, seed, size, scratch)))
    gen_jobs.append(("legacy", ["--legacy"], lambda: osup.run_gen_legacy(work / "legacy")))
    log(f"generating: {len(small)} small, {len(medium)} medium, legacy")
    generated = pmap(args.jobs, lambda job: job[2](), gen_jobs)

    cases: list[dict[str, Any]] = []
    for (kind, gen_args, _), paths in zip(gen_jobs, generated, strict=True):
        for path in paths:
            cases.append({"name": path.stem, "kind": kind, "path": path, "genArgs": gen_args})
    corpus = sorted(args.corpus_dir.glob("*.jsonl")) if args.corpus_dir.is_dir() else []
    if not corpus:
        log(f"warning: no corpus files in {args.corpus_dir}: no corpus fixtures")
    cases += [{"name": p.stem, "kind": "corpus", "path": p, "genArgs": None} for p in corpus]
    cases += [{"name": p.stem, "kind": "crafted", "path": p, "genArgs": None}
              for p in sorted((out / CRAFTED_DIR).glob("*.jsonl"))]
    names = [(c["kind"] == "corpus", c["name"]) for c in cases]
    if len(set(names)) != len(names):
        log("error: two fixtures with one name")
        return 1

    # 2. describe
    def describe(case: dict[str, Any]) -> dict[str, Any]:
        data = case["path"].read_bytes()
        all_leaves = osup.wants_all_leaves(data)
        raw = osup.run_describe_raw(case["path"], all_leaves)
        doc = json.loads(raw)
        sha = osup.sha256_bytes(data)
        if doc.get("inputSha256") != sha or doc.get("file") != case["path"].name:
            raise osup.OracleError(f"{case['path']}: describe.mjs reports {doc.get('file')} "
                                   f"{doc.get('inputSha256')}, not {case['path'].name} {sha}")
        reduced = case["kind"] == "corpus"
        stored = (json.dumps(osup.reduce_for_corpus(doc), ensure_ascii=True, separators=(",", ":")).encode()
                  if reduced else raw)
        if reduced:
            rel_describe = f"corpus/{case['name']}.json.gz"
            rel_session = None
        elif case["kind"] == "crafted":  # the session file is ours, kept where it is
            rel_describe = f"describe/{case['name']}.json.gz"
            rel_session = f"{CRAFTED_DIR}/{case['name']}.jsonl"
        else:
            rel_describe = f"describe/{case['name']}.json.gz"
            rel_session = f"sessions/{case['name']}.jsonl"
            write_if_changed(out / rel_session, data)
        write_if_changed(out / rel_describe, gz(stored))
        open_error = doc.get("openError")
        flags = " all-leaves" if all_leaves else ""
        log(f"  {case['kind']:10} {case['name']:64} {len(raw) / 1e6:7.2f} MB{flags}")
        return {
            "name": case["name"],
            "kind": case["kind"],
            "session": rel_session,
            "source": (f"../shared/corpus/pi-sessions/{case['path'].name} (not copied: licences vary)"
                       if reduced else rel_session),
            "sourceSha256": sha,
            "sourceBytes": len(data),
            "describe": rel_describe,
            "describeFlags": osup.describe_flags(all_leaves),
            "reduced": reduced,
            "storedJsonSha256": osup.sha256_bytes(stored),
            "gen": f"gen.mjs {' '.join(case['genArgs'])}" if case["genArgs"] else None,
            "genMjsSha256": oracle["genMjsSha256"] if case["genArgs"] else None,
            "piVersion": doc.get("piVersion"),
            "openError": open_error.get("name") if isinstance(open_error, dict) else open_error,
            "oracleErrors": summarize_errors(doc),
        }

    log(f"describing {len(cases)} files with {args.jobs} jobs")
    fixtures = pmap(args.jobs, describe, cases)

    # 3. drop stale files, write the manifest
    keep = {out / f[key] for f in fixtures for key in ("session", "describe") if f[key]}
    for folder in KIND_DIRS:
        for path in sorted((out / folder).glob("*")) if (out / folder).is_dir() else []:
            if path not in keep:
                log(f"  removing stale {path.relative_to(out)}")
                path.unlink()
    counts: dict[str, int] = {}
    for f in fixtures:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    manifest = {
        "about": "Golden outputs of the real Pi (../shared/oracle); see tools/oracle_fixtures.py. Corpus "
                 "fixtures are reduce_for_corpus() documents (tests/oracle_support.py): no corpus text.",
        "regenerate": f"python tools/oracle_fixtures.py --small-seeds {format_seeds(small)} "
                      f"--medium-seeds {format_seeds(medium)} --jobs 2",
        "oracle": oracle,
        "counts": counts,
        "fixtures": fixtures,
    }
    text = json.dumps(manifest, indent=1, ensure_ascii=False) + "\n"
    write_if_changed(out / "MANIFEST.json", text.encode())
    attributes = out / ".gitattributes"  # byte-exact session files (CRLF, BOM, invalid UTF-8)
    write_if_changed(attributes, b"* -text\n")

    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log(f"wrote {len(fixtures)} fixtures ({counts}) to {out}: {total / 1e6:.2f} MB")
    for f in fixtures:
        if f["openError"] or f["oracleErrors"]:
            log(f"  note {f['kind']}/{f['name']}: openError={f['openError']} errors={f['oracleErrors']}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except osup.OracleError as error:
        log(f"error: {error}")
        sys.exit(1)
