"""Operation scripts: the same SessionManager calls applied to our store and to the real Pi.

A script is a JSON document ``{"format": 1, "name", "seed", "start", "ops": [{"op", "args"}]}``.
``args`` are Pi's positional arguments (a missing trailing argument is JavaScript's
``undefined``); sessions are named by id, where Pi takes a file path. Three ops only steer the
two id/time sources so that both sides are deterministic:

* ``clock [ms]``: the time every later entry, header and session gets (until the next ``clock``);
* ``uuids [[uuid, ...]]``: the next values of ``randomUUID()`` (entry ids are their first 8
  characters), taken before the script's own stream, e.g. to make an entry id collide;
* ``sessionIds [[id, ...]]``: likewise for the next ``uuidv7()`` session ids.

Without forced values both sides draw the k-th UUID / session id of the script's stream:
:func:`stream_value` (sha256 of ``"<seed>:<kind>:<k>"`` shaped as a UUID; ``tests/apidiff/
pi_runner.mjs`` computes the same).

:func:`run_script` applies a script to a :class:`SessionStore` and returns its :class:`Outcome`:
one record per op (``{"ret", "leaf"}`` or ``{"error": <our error class>, "leaf"}``), a snapshot
(header and entries as JSON lines) of each session the script leaves, and the exported bytes of
every session that ended up stored. The Node runner produces the same for Pi; equal outcomes
mean "the same operations give the same file".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from store import errors
from store.format import js_parse, js_stringify
from store.format.jsvalue import UNDEFINED
from store.interchange.verifying import verify_session
from store.manager import SessionManager
from store.services import CompactionSettings, compute_file_lists
from store.session_store import SessionStore

FORMAT = 1
SESSION_SWITCHES = ("create", "inMemory", "open", "continueRecent", "forkFrom")


def stream_value(seed: int, kind: str, k: int) -> str:
    """The k-th value (0-based) of a script's ``uuid`` or ``session`` stream."""
    h = hashlib.sha256(f"{seed}:{kind}:{k}".encode()).hexdigest()
    version = "4" if kind == "uuid" else "7"
    return f"{h[:8]}-{h[8:12]}-{version}{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


class ScriptIds:
    """The id source of one script run (``SessionStore(ids=...)``): forced values first."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.forced: dict[str, list[str]] = {"uuid": [], "session": []}
        self.drawn = {"uuid": 0, "session": 0}

    def __call__(self, kind: str) -> str:
        if self.forced[kind]:
            return self.forced[kind].pop(0)
        self.drawn[kind] += 1
        return stream_value(self.seed, kind, self.drawn[kind] - 1)


class ScriptClock:
    """A clock that only the script moves (``clock`` ops); reading it changes nothing."""

    def __init__(self, start_ms: float) -> None:
        self.now = start_ms

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class Outcome:
    """What a script run produced: per-op records, session snapshots, stored files."""

    results: list[dict[str, Any]]
    states: list[str]
    files: dict[str, bytes]
    damaged: dict[str, str] = dataclasses.field(default_factory=dict)  # ours: sessions verify finds damaged

    def to_json(self) -> dict[str, Any]:
        return {
            "results": self.results,
            "states": self.states,
            "files": {sid: data.decode("utf-8") for sid, data in sorted(self.files.items())},
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Outcome:
        return cls(doc["results"], doc["states"], {sid: text.encode("utf-8") for sid, text in doc["files"].items()})


def parse_script(text: str) -> dict[str, Any]:
    """A script from its JSON text, numbers and strings read as JavaScript reads them."""
    script = js_parse(text)
    if script.get("format") != FORMAT:
        raise ValueError(f"not an operation script of format {FORMAT}: {script.get('format')!r}")
    return script


def dump_script(script: dict[str, Any]) -> str:
    """One line of JSON that ``JSON.parse`` and :func:`parse_script` read alike (number literals
    such as ``-0.0`` and ``12345678901234567890`` are kept, lone surrogates escaped)."""
    return json.dumps(script, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def snapshot(sm: SessionManager) -> str:
    """The session as Pi holds it: its header and every entry, one ``JSON.stringify`` line each."""
    return "".join(js_stringify(v) + "\n" for v in [sm.get_header(), *sm.get_entries()])


def _arg(args: list[Any], i: int) -> Any:
    """Argument ``i``, or None (our "not given") when the script leaves it out."""
    return args[i] if i < len(args) else None


def _option_id(args: list[Any], i: int) -> str | None:
    options = _arg(args, i)
    return options.get("id") if isinstance(options, dict) else None


# One op = one call, on a store (session switches) or on the current manager.
SWITCH_OPS: dict[str, Callable[[Any, list[Any]], Any]] = {
    "create": lambda store, a: store.create(a[0], session_id=_option_id(a, 1)),
    "inMemory": lambda store, a: store.in_memory(a[0], session_id=_option_id(a, 1)),
    "open": lambda store, a: store.open(a[0]),
    "continueRecent": lambda store, a: store.continue_recent(a[0]),
    "forkFrom": lambda store, a: store.fork_from(a[0], a[1], new_session_id=_option_id(a, 2)),
}
MANAGER_OPS: dict[str, Callable[[Any, list[Any]], Any]] = {
    "appendMessage": lambda sm, a: sm.append_message(a[0]),
    "appendThinkingLevelChange": lambda sm, a: sm.append_thinking_level_change(a[0]),
    "appendModelChange": lambda sm, a: sm.append_model_change(a[0], a[1]),
    "appendUsage": lambda sm, a: sm.append_usage(a[0], a[1], a[2], a[3], _arg(a, 4)),
    "appendCompaction": lambda sm, a: sm.append_compaction(a[0], a[1], a[2], *(_arg(a, i) for i in (3, 4, 5))),
    "appendCustomEntry": lambda sm, a: sm.append_custom_entry(a[0], _arg(a, 1)),
    "appendSessionInfo": lambda sm, a: sm.append_session_info(a[0]),
    "appendCustomMessageEntry": lambda sm, a: sm.append_custom_message_entry(a[0], a[1], a[2], _arg(a, 3)),
    "appendLabelChange": lambda sm, a: sm.append_label_change(a[0], _arg(a, 1)),
    "appendContextEdit": lambda sm, a: sm.append_context_edit(a[0], a[1]),
    "branch": lambda sm, a: sm.branch(a[0]),
    "resetLeaf": lambda sm, a: sm.reset_leaf(),
    "branchWithSummary": lambda sm, a: sm.branch_with_summary(a[0], a[1], *(_arg(a, i) for i in (2, 3, 4))),
    "createBranchedSession": lambda sm, a: sm.create_branched_session(a[0]),
    "getSessionName": lambda sm, a: sm.get_session_name(),
    "getLabel": lambda sm, a: sm.get_label(a[0]),
}


def compact_settings(args: list[Any]) -> CompactionSettings:
    """The ``compact`` op's settings (``args``: keep-recent tokens, then the summary text)."""
    return CompactionSettings(True, 16384, args[0])


def compaction_args(prep: Any, args: list[Any]) -> tuple | None:
    """The ``append_compaction`` arguments of a ``compact`` op, given its preparation (None: nothing to do)."""
    if prep is None:
        return None
    read_files, modified_files = compute_file_lists(prep.file_ops)
    return (
        args[1],
        prep.first_kept_entry_id,
        prep.tokens_before,
        {"readFiles": read_files, "modifiedFiles": modified_files},
    )


def session_record(sm: Any) -> dict[str, Any]:
    """What a session switch returns."""
    return {"sessionId": sm.get_session_id(), "cwd": sm.get_cwd(), "persisted": sm.is_persisted()}


StoreFactory = Callable[["ScriptClock", "ScriptIds"], Any]
"""A store for one script run, given its clock and id source: a :class:`SessionStore`, or any
object with its call shapes (the async API's, through ``tests/async_as_sync.py``)."""


def sync_stores(engine: Engine) -> StoreFactory:
    """Each script run on a new :class:`SessionStore` over ``engine``."""
    return lambda clock, ids: SessionStore(engine, clock=clock, ids=ids)


class ScriptRun:
    """One script applied op by op to a store (also used by the generator, which looks at
    ``sm`` between ops to choose the next one)."""

    def __init__(self, stores: StoreFactory, seed: int, start_ms: float) -> None:
        self.clock = ScriptClock(start_ms)
        self.ids = ScriptIds(seed)
        self.store = stores(self.clock, self.ids)
        self.sm: SessionManager | None = None
        self.results: list[dict[str, Any]] = []
        self.states: list[str] = []
        self.session_ids: list[str] = []

    def apply(self, op: str, args: list[Any]) -> dict[str, Any]:
        """Run one op; its record (also appended to ``results``)."""
        if op in SESSION_SWITCHES and self.sm is not None:
            self.states.append(snapshot(self.sm))
        try:
            record: dict[str, Any] = {"ret": self._call(op, args)}
        except errors.StoreError as error:
            record = {"error": type(error).__name__}
        record["leaf"] = self.sm.get_leaf_id() if self.sm is not None else None
        if self.sm is not None and self.sm.get_session_id() not in self.session_ids:
            self.session_ids.append(self.sm.get_session_id())
        self.results.append(record)
        return record

    def _call(self, op: str, args: list[Any]) -> Any:
        if op == "clock":
            self.clock.now = args[0]
            return None
        if op in ("uuids", "sessionIds"):
            self.ids.forced["uuid" if op == "uuids" else "session"].extend(args[0])
            return None
        if op in SESSION_SWITCHES:
            sm = SWITCH_OPS[op](self.store, args)  # before the current one closes (a fork copies it)
            if self.sm is not None:
                self.sm.close()
            self.sm = sm
            return session_record(sm)
        sm = self.sm
        assert sm is not None, f"{op} before any session op"
        if op == "compact":
            append = compaction_args(sm.prepare_compaction(compact_settings(args)), args)
            return None if append is None else sm.append_compaction(*append)
        if op not in MANAGER_OPS:
            raise ValueError(f"unknown op {op!r}")
        return MANAGER_OPS[op](sm, args)

    def finish(self) -> Outcome:
        """Snapshot the last session and export every session of the run that got stored."""
        if self.sm is not None:
            self.states.append(snapshot(self.sm))
            self.sm.close()
        files = {
            sid: b"".join(self.store.iter_export(sid))
            for sid in self.session_ids
            if self.store.find_by_id(sid) is not None
        }
        damaged = {}  # verify, the kept totals too (sync stores: verify takes a sync engine)
        if isinstance(self.store, SessionStore):
            damaged = {sid: health.describe() for sid in files if not (health := verify_session(self.store, sid)).ok}
        return Outcome(self.results, self.states, files, damaged)


def run_script(engine: Engine, script: dict[str, Any]) -> Outcome:
    """Apply every op of ``script`` to a store on ``engine``."""
    return run_script_on(sync_stores(engine), script)


def run_script_on(stores: StoreFactory, script: dict[str, Any]) -> Outcome:
    """Apply every op of ``script`` to the store ``stores`` makes for it."""
    run = ScriptRun(stores, script["seed"], script["start"])
    for step in script["ops"]:
        run.apply(step["op"], step.get("args", []))
    return run.finish()


def first_difference(pi: Outcome, ours: Outcome, script: dict[str, Any]) -> str | None:
    """Where our outcome parts from Pi's (None when they are the same)."""
    for i, (theirs, mine) in enumerate(zip(pi.results, ours.results, strict=False)):
        if js_stringify(theirs) != js_stringify(_plain(mine)):
            step = script["ops"][i]
            call = f"{step['op']}{js_stringify(step.get('args', []))[:200]}"
            return f"op {i} {call}: Pi {js_stringify(theirs)[:300]}, ours {js_stringify(_plain(mine))[:300]}"
    if len(pi.results) != len(ours.results):
        return f"{len(pi.results)} records from Pi, {len(ours.results)} ours"
    for i, (theirs, mine) in enumerate(zip(pi.states, ours.states, strict=False)):
        if theirs != mine:
            return f"session snapshot {i}: {_line_difference(theirs.encode(), mine.encode())}"
    if len(pi.states) != len(ours.states):
        return f"{len(pi.states)} session snapshots from Pi, {len(ours.states)} ours"
    if sorted(pi.files) != sorted(ours.files):
        return f"stored sessions: Pi {sorted(pi.files)}, ours {sorted(ours.files)}"
    for sid, data in pi.files.items():
        if data != ours.files[sid]:
            return f"file of {sid}: {_line_difference(data, ours.files[sid])}"
    if ours.damaged:
        return f"verify: {ours.damaged}"
    return None


def _plain(value: Any) -> Any:
    """A record with our return values as Pi returns them (None and UNDEFINED are null)."""
    if value is UNDEFINED:
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not UNDEFINED}
    return value


def _line_difference(theirs: bytes, mine: bytes) -> str:
    a, b = theirs.split(b"\n"), mine.split(b"\n")
    for n, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"line {n + 1}: Pi {x[:300]!r}, ours {y[:300]!r}"
    return f"Pi has {len(a)} lines, ours {len(b)}"
