"""Seeded random operation scripts (see ``script.py``).

A script is built op by op while it runs on a private in-memory store, so that each op can aim at
what exists at that moment: the active branch, other branches, labels and other metadata
entries, sessions made earlier in the script. Rejected operations are mixed in on purpose
(unknown ids, context edits off the branch or of non-editable entries, bad replacements, invalid
session ids, forks of sessions that were never stored). Payloads carry Unicode and number edge
cases. The same ``(seed, min_ops, max_ops)`` always gives the same script.
"""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import Engine

from store.db.engine import make_engine
from store.db.schema import metadata
from store.format import js_parse
from store.new_entries import resolve_cwd
from tests.apidiff.script import FORMAT, ScriptRun, dump_script, sync_stores

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

WORDS = ["plan", "read", "file", "fix", "test", "diff", "ok", "why", "step", "tree", "branch", "edit"]
ODD_TEXT = ["漢字かな", "👩‍💻🏳️‍🌈", "שלום עולם", "e\u0301\u0327", "\u0001\u001f", "\u007f", "\u2028", "\u2029",
            "\ufeff", "\ud800", "\udfff x", "\u0000", "tab\there", "quote\"back\\slash", "\r\n", "\u00a0\u3000",
            "ｓｅｃｔｉｏｎ", "</script>", "{\"json\": 1}", " "]
NUMBERS: list[Any] = [0.1 + 0.2, 1e21, 1e-7, -0.0, 2**53, 2**53 + 2, 12345678901234567890, 1e20, 1e-6, 5e-324,
                      1.5, -1, 0, 7, 1.7976931348623157e308, 123456.789]
SUMMARY_KEEP = [0, 10, 50, 200, 1000, 20000]
TOOLS = [{"name": "read", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
         {"name": "bash", "description": "Run ✓", "parameters": {"type": "object", "2": {"10": 1.5}}}]


class Generator:
    """One script: its ops, chosen while they run on ``engine``."""

    def __init__(self, engine: Engine, seed: int, min_ops: int, max_ops: int) -> None:
        self.rng = random.Random(f"apidiff:{seed}")
        self.seed = seed
        self.target = self.rng.randint(min_ops, max_ops)
        self.run = ScriptRun(sync_stores(engine), seed, START_MS)
        self.ops: list[dict[str, Any]] = []
        self.now = START_MS
        self.cwds: dict[str, int] = {}  # sessions made per resolved cwd
        self.cwd_count = 0
        self.explicit = 0

    # ------------------------------------------------------------------ payloads
    def text(self, lo: int = 1, hi: int = 6) -> str:
        r = self.rng
        parts = [r.choice(ODD_TEXT) if r.random() < 0.2 else r.choice(WORDS) for _ in range(r.randint(lo, hi))]
        return " ".join(parts)

    def number(self) -> Any:
        return self.rng.choice(NUMBERS)

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        kind = r.randint(0, 9 if depth < 2 else 5)
        if kind <= 1:
            return self.number()
        if kind == 2:
            return self.text(0, 3)
        if kind == 3:
            return r.choice([True, False, None])
        if kind in (4, 5):
            return [] if depth >= 2 else [self.value(depth + 1) for _ in range(r.randint(0, 3))]
        keys = r.sample(["2", "10", "a", "z", "__proto__", "01", "-1", "4294967294", "4294967295", "ключ", "b"],
                        r.randint(0, 4))
        return {k: self.value(depth + 1) for k in keys}

    def given(self) -> Any:
        """A value for an optional argument: anything but a top-level null (our None means "not
        given", see docs/design.md)."""
        value = self.value()
        return self.text() if value is None else value

    def usage(self) -> dict:
        r = self.rng
        total = r.choice([0, r.randint(1, 5000)])
        return {"input": r.randint(0, 3000), "output": r.randint(0, 900), "cacheRead": 0,
                "cacheWrite": r.choice([0, 5]),
                "totalTokens": total, "cost": {"input": self.number(), "output": 0.001, "total": 0.1 + 0.2}}

    def message(self) -> dict:
        r = self.rng
        ts = r.choice([self.now, 1, self.number()])
        roles = ["user", "assistant", "toolResult", "bashExecution", "custom", "system"]
        role = r.choices(roles, [5, 5, 3, 1, 1, 2])[0]
        if role == "user":
            content: Any = r.choice([
                self.text(), "", [{"type": "text", "text": self.text()}],
                [{"type": "text", "text": self.text()}, {"type": "image", "data": "aGk=", "mimeType": "image/png"}],
            ])
            return {"role": "user", "content": content, "timestamp": ts}
        if role == "assistant":
            blocks: list[Any] = []
            for _ in range(r.randint(0, 3)):
                kind = r.choice(["text", "thinking", "toolCall"])
                if kind == "text":
                    blocks.append({"type": "text", "text": self.text()})
                elif kind == "thinking":
                    blocks.append({"type": "thinking", "thinking": self.text(), "thinkingSignature": "sig"})
                else:
                    name = r.choice(["read", "edit", "write", "bash"])
                    args = {"path": f"/w/{r.choice(WORDS)}.py"} if name != "bash" else {"command": self.text()}
                    if r.random() < 0.4:
                        args["extra"] = self.value()
                    blocks.append({"type": "toolCall", "id": f"call_{r.randint(1, 99)}", "name": name,
                                   "arguments": args})
            msg = {"role": "assistant", "content": blocks, "api": "anthropic-messages", "provider": "anthropic",
                   "model": "claude-x", "usage": self.usage(),
                   "stopReason": r.choice(["stop", "toolUse", "length", "error", "aborted"]), "timestamp": ts}
            if r.random() < 0.2:
                msg["errorMessage"] = self.text()
            return msg
        if role == "toolResult":
            return {"role": "toolResult", "toolCallId": f"call_{r.randint(1, 99)}", "toolName": "read",
                    "content": [{"type": "text", "text": self.text()}], "isError": r.random() < 0.3,
                    "details": self.value(), "timestamp": ts}
        if role == "bashExecution":
            return {"role": "bashExecution", "command": self.text(), "output": self.text(), "exitCode": r.randint(0, 2),
                    "cancelled": False, "truncated": r.random() < 0.2, "timestamp": ts}
        if role == "custom":
            return {"role": "custom", "customType": "ext.msg", "content": self.text(), "display": True, "timestamp": ts}
        system: dict[str, Any] = {"role": "system", "content": r.choice(["", self.text()])}
        sections = {name: (None if r.random() < 0.2 else f"<{name}>{self.text()}</{name}>")
                    for name in r.sample(["preamble", "tools", "cwd", "10", "2", "ｓｅｃｔｉｏｎ"], r.randint(0, 3))}
        if sections:
            system["sections"] = sections
        if r.random() < 0.4:
            system["toolsAdded"] = r.sample(TOOLS, r.randint(1, 2))
        if r.random() < 0.2:
            system["toolsRemoved"] = ["bash"]
        system["timestamp"] = ts
        return system

    # ------------------------------------------------------------------ targets
    def entry_ids(self) -> list[str]:
        sm = self.run.sm
        return [e["id"] for e in sm.get_entries()] if sm is not None else []

    def some_id(self, on_branch: float = 0.5) -> str:
        """An id of the session (on the active branch with probability ``on_branch``), or now and
        then one that does not exist."""
        r = self.rng
        sm = self.run.sm
        assert sm is not None
        if r.random() < 0.07:
            return r.choice(["deadbeef", "", "root", "00000000", "DEADBEEF"])
        pool = [i for i in sm.get_branch_ids() if i is not None] if r.random() < on_branch else self.entry_ids()
        return r.choice(pool) if pool else "deadbeef"

    def new_cwd(self) -> str:
        self.cwd_count += 1
        base = f"/work/apidiff-{self.seed}/c{self.cwd_count}"
        doubled = f"/work/apidiff-{self.seed}//c{self.cwd_count}"
        return self.rng.choice([base, base, f"{base}/", f"{base}/x/..", doubled])

    def session_options(self) -> list[Any]:
        r = self.rng
        if r.random() < 0.7:
            return []
        if r.random() < 0.2:
            return [{"id": r.choice(["-bad", "a b", "ok.", "ü", ""])}]
        self.explicit += 1
        return [{"id": f"s{self.seed}-{self.explicit}.x_y"}]

    # ------------------------------------------------------------------ ops
    def emit(self, op: str, *args: Any) -> None:
        step = {"op": op, "args": list(args)}
        self.ops.append(step)
        # apply what the runners will read (numbers and strings as JavaScript reads them)
        parsed = js_parse(dump_script(step))
        self.run.apply(parsed["op"], parsed["args"])

    def tick(self) -> None:
        r = self.rng
        x = r.random()
        if x < 0.55:
            return
        self.now += r.choice([0, 1, r.randint(2, 90_000)]) if x < 0.95 else -r.randint(1, 86_400_000)
        self.emit("clock", self.now)

    def session_op(self, first: bool) -> None:
        r = self.rng
        kind = r.choices(["create", "inMemory", "continueRecent", "open", "forkFrom"],
                         [6, 2, 2, 0 if first else 2, 0 if first else 2])[0]
        known = self.run.session_ids
        if kind == "create":
            cwd = self.new_cwd()
            self.made_in(cwd)
            self.emit("create", cwd, *self.session_options())
        elif kind == "inMemory":
            self.emit("inMemory", self.new_cwd(), *self.session_options())
        elif kind == "continueRecent":
            single = [c for c, n in self.cwds.items() if n == 1]
            cwd = r.choice(single) if single and r.random() < 0.7 else self.new_cwd()
            if self.cwds.get(resolve_cwd(cwd), 0) == 0:
                self.made_in(cwd)
            self.emit("continueRecent", cwd)
        elif kind == "open":
            self.emit("open", r.choice(known) if known and r.random() < 0.9 else "no-such-session")
        else:
            cwd = self.new_cwd()
            self.made_in(cwd)
            source = r.choice(known) if known and r.random() < 0.9 else "no-such-session"
            self.emit("forkFrom", source, cwd, *self.session_options())

    def made_in(self, cwd: str) -> None:
        """Count a session of ``cwd``: continueRecent only goes where there is at most one, since
        Pi picks the newest file by mtime and we the latest activity (docs/design.md)."""
        key = resolve_cwd(cwd)
        self.cwds[key] = self.cwds.get(key, 0) + 1

    def collide(self) -> None:
        ids = self.entry_ids()
        if not ids:
            return
        taken = self.rng.choice(ids)
        count = 100 if self.rng.random() < 0.1 else self.rng.randint(1, 3)
        self.emit("uuids", [f"{taken[:8]}-0000-4000-8000-{n:012x}" for n in range(count)])

    def step(self) -> None:
        r = self.rng
        if self.run.sm is None:
            self.session_op(first=True)
            return
        op = r.choices(
            ["message", "thinking", "model", "usage", "compaction", "compact", "custom", "info", "custom_message",
             "label", "edit", "branch", "reset", "branch_summary", "branched_session", "session", "name", "get_label",
             "collide"],
            [30, 2, 2, 2, 2, 3, 3, 2, 3, 5, 6, 7, 1, 3, 1, 2, 1, 1, 1])[0]
        if op not in ("branch", "reset", "session", "name", "get_label", "collide"):
            self.tick()
        if op == "message":
            self.emit("appendMessage", self.message())
        elif op == "thinking":
            self.emit("appendThinkingLevelChange", r.choice(["off", "low", "high", "xhigh"]))
        elif op == "model":
            self.emit("appendModelChange", r.choice(["anthropic", "openai"]), r.choice(["m-1", "m-2", "模型"]))
        elif op == "usage":
            self.emit("appendUsage", r.choice(["summary", "title"]), "anthropic", "m-1", self.usage(),
                      *r.choice([[], [""], [self.text()]]))
        elif op == "compaction":
            first_kept = r.choice([None, self.some_id(0.8), "deadbeef"])
            extra = r.choice([[], [{"readFiles": ["/a"], "modifiedFiles": []}], [self.given(), True],
                              [{"k": 1}, False, self.usage()]])
            self.emit("appendCompaction", self.text(), first_kept, r.randint(0, 99999), *extra)
        elif op == "compact":
            self.emit("compact", r.choice(SUMMARY_KEEP), f"## Goal\n{self.text()}")
        elif op == "custom":
            self.emit("appendCustomEntry", r.choice(["ext.state", "pi.virtual-model-state"]),
                      *r.choice([[], [self.given()]]))
        elif op == "info":
            name = r.choice([self.text(), " a\r\n\nb ", "", "   ", "\ufeff x \u00a0", "\u2028"])
            self.emit("appendSessionInfo", name)
        elif op == "custom_message":
            content = r.choice([self.text(), "", [{"type": "text", "text": self.text()}], []])
            details = r.choice([[], [self.given()]])
            self.emit("appendCustomMessageEntry", "ext.note", content, r.random() < 0.5, *details)
        elif op == "label":
            label = r.choice([[self.text(1, 2)], [""], [], [self.text(1, 2)]])
            self.emit("appendLabelChange", self.some_id(0.5), *label)
        elif op == "edit":
            replacement = r.choice([
                None, {"content": self.text()}, {"content": [{"type": "text", "text": self.text()}]},
                {"content": self.text(), "extra": 1}, {"content": 5}, {"text": "x"}, "plain", [],
            ])
            self.emit("appendContextEdit", self.some_id(0.8), replacement)
        elif op == "branch":
            self.emit("branch", self.some_id(0.3))
        elif op == "reset":
            self.emit("resetLeaf")
        elif op == "branch_summary":
            target = None if r.random() < 0.1 else self.some_id(0.6)
            extra = r.choice([[], [self.given()], [{"readFiles": []}, True], [self.given(), False, self.usage()]])
            self.emit("branchWithSummary", target, self.text(0, 5), *extra)
        elif op == "branched_session":
            self.made_in(self.run.sm.get_cwd())
            self.emit("createBranchedSession", self.some_id(0.5))
        elif op == "session":
            self.session_op(first=False)
        elif op == "name":
            self.emit("getSessionName")
        elif op == "get_label":
            self.emit("getLabel", self.some_id(0.5))
        else:
            self.collide()

    def script(self) -> dict[str, Any]:
        while len(self.ops) < self.target:
            self.step()
        self.run.finish()
        return {"format": FORMAT, "name": f"seed{self.seed}", "seed": self.seed, "start": START_MS, "ops": self.ops}


def generator_engine() -> Engine:
    """The private store scripts are built on (one for any number of scripts)."""
    engine = make_engine("sqlite://")
    metadata.create_all(engine)
    return engine


def generate(seed: int, min_ops: int = 20, max_ops: int = 400, engine: Engine | None = None) -> dict[str, Any]:
    """The script of ``seed``: between ``min_ops`` and ``max_ops`` ops (a few more when the last
    step emits several)."""
    return Generator(engine or generator_engine(), seed, min_ops, max_ops).script()
