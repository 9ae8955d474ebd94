"""Session files for the retention tests: branched histories whose branches are old or recent.

:func:`branched_session` writes a file (lines as Pi writes them) with a current path, abandoned
branches older than the cutoff — one plain, one labelled, one with a recent entry at its tip —,
labels set and cleared, a compaction, usage on dropped and kept branches, a name set on a
dropped branch and another on the path, and a line that is not JSON. ``DROPPED`` names the
entries a prune at 30 days must remove, no more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from store.format import js_stringify
from store.format.jsdate import js_iso

DAY_MS = 86_400_000
DROPPED = ("a3", "a4", "a5", "a6")  # the plain abandoned branch (user, assistant, thinking level, old name)


def _usage(total: int, cost: float) -> dict[str, Any]:
    return {"input": total - 10, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": total,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost}}


def branched_lines(session_id: str, now_ms: float, word: str, cwd: str = "/work/project",
                   leaf_ms: float | None = None) -> list[str]:
    """The lines of one session (see the module docstring); ``word`` is in every text, to search;
    ``leaf_ms``: when the last message was written (default: 90 days before ``now_ms``, as the rest)."""
    old, recent = now_ms - 90 * DAY_MS, now_ms - DAY_MS
    clock = [old]

    def at(ms: float | None = None) -> tuple[str, float]:
        clock[0] = clock[0] + 1000 if ms is None else ms
        return js_iso(clock[0]), clock[0]

    def entry(kind: str, entry_id: str, parent: str | None, ms: float | None = None, **fields: Any) -> str:
        stamp, _ = at(ms)
        return js_stringify({"type": kind, "id": entry_id, "parentId": parent, "timestamp": stamp, **fields})

    def message(entry_id: str, parent: str | None, role: str, body: str, ms: float | None = None,
                usage: dict | None = None) -> str:
        stamp, moment = at(ms)
        msg: dict[str, Any] = {"role": role, "content": body if role == "user" else [{"type": "text", "text": body}],
                               "timestamp": int(moment)}
        if role == "assistant":
            msg.update(api="openai-completions", provider="local", model="m1", stopReason="stop")
            if usage:
                msg["usage"] = usage
        return js_stringify({"type": "message", "id": entry_id, "parentId": parent, "timestamp": stamp,
                             "message": msg})

    header = js_stringify({"type": "session", "version": 3, "id": session_id, "timestamp": at()[0], "cwd": cwd})
    return [
        header,
        message("r1", None, "user", f"first question {word} root"),
        message("r2", "r1", "assistant", f"first answer {word}", usage=_usage(100, 0.01)),
        # abandoned, old, nothing to keep: dropped
        message("a3", "r2", "user", f"abandoned {word} zebra"),
        message("a4", "a3", "assistant", f"abandoned answer {word} quokka", usage=_usage(500, 0.05)),
        entry("thinking_level_change", "a5", "a4", thinkingLevel="high"),
        entry("session_info", "a6", "a5", name="Old name"),
        # abandoned, old, labelled below: kept
        message("b7", "r2", "user", f"labelled branch {word} marmot"),
        message("b8", "b7", "assistant", f"labelled answer {word}", usage=_usage(200, 0.02)),
        # abandoned, old, but its tip is recent (not a user/assistant message: those would make the
        # whole session recent, Pi's modified time): kept with its path
        message("c9", "r2", "user", f"old start of {word} ibex"),
        entry("custom_message", "c10", "c9", ms=recent, customType="note", content=f"recent tip {word} ibex",
              display=True),
        "this line is not JSON",
        # the current path
        message("p11", "r2", "user", f"main path {word}", ms=old + 3_600_000),
        entry("model_change", "p12", "p11", provider="local", modelId="m2"),
        entry("compaction", "p13", "p12", summary=f"summary {word}", firstKeptEntryId="p11", tokensBefore=1234),
        message("p14", "p13", "assistant", f"after compaction {word}", usage=_usage(400, 0.04)),
        entry("label", "p15", "p14", targetId="b8", label="keep-me"),
        entry("label", "p16", "p15", targetId="a4", label="temporary"),
        entry("label", "p17", "p16", targetId="a4"),  # clears a4's label: a4 may go
        entry("session_info", "p18", "p17", name="Current name"),
        message("p19", "p18", "user", f"last question {word}", ms=leaf_ms),
    ]


def write_session(path: Path, lines: list[str]) -> Path:
    path.write_bytes("".join(line + "\n" for line in lines).encode())
    return path


def without(lines: list[str], entry_ids: tuple[str, ...]) -> list[str]:
    """``lines`` minus the entries with these ids (what the export of a pruned session holds)."""
    return [line for line in lines if not any(f'"id":"{entry_id}",' in line for entry_id in entry_ids)]


def bulky_lines(session_id: str, now_ms: float, branches: int, branch_rows: int = 4) -> list[str]:
    """A long old session: a current path of ``branches`` user messages, each with an abandoned
    branch of ``branch_rows`` messages written before the path goes on (so that a prune both
    drops many rows and renumbers most of the rest)."""
    ms = now_ms - 90 * DAY_MS
    lines = [js_stringify({"type": "session", "version": 3, "id": session_id, "timestamp": js_iso(ms),
                           "cwd": "/work/bulky"})]
    parent = None
    for branch in range(branches):
        ms += 1000
        path_id = f"p{branch}"
        lines.append(js_stringify({"type": "message", "id": path_id, "parentId": parent, "timestamp": js_iso(ms),
                                   "message": {"role": "user", "content": f"path step {branch} gnu",
                                               "timestamp": int(ms)}}))
        above = path_id
        for row in range(branch_rows):
            ms += 1
            entry_id = f"b{branch}x{row}"
            lines.append(js_stringify({
                "type": "message", "id": entry_id, "parentId": above, "timestamp": js_iso(ms),
                "message": {"role": "assistant", "content": [{"type": "text", "text": f"abandoned {branch} {row} yak"}],
                            "provider": "local", "model": "m1", "api": "x", "stopReason": "stop",
                            "timestamp": int(ms)}}))
            above = entry_id
        parent = path_id
    return lines
