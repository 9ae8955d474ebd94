"""Session files for the viewer's tests and benchmark, written as Pi writes them: a hostile one
(markup, script, links, ANSI, bidi controls in every text field), a long linear one and a
many-branched one."""

from __future__ import annotations

from pathlib import Path

import orjson

HOSTILE_ID = "0190c0de-0000-7000-8000-00000000bad1"
LONG_ID = "0190c0de-0000-7000-8000-000000005000"
BRANCHY_ID = "0190c0de-0000-7000-8000-000000000100"
HOSTILE_TEXT = ('<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'
                '[click](javascript:alert(1)) </textarea></script> \x1b[31mRED\x1b[0m \u202eevil\u202c <b>bold</b>')
PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


def _ts(n: int) -> str:
    day, rest = divmod(n, 86_400)
    hours, rest = divmod(rest, 3600)
    return f"2026-03-{1 + day % 28:02d}T{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.000Z"


def _ms(n: int) -> int:
    return 1_772_323_200_000 + n * 1000


def _user(entry_id: str, parent: str | None, n: int, text: str) -> dict:
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": _ts(n),
            "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": _ms(n)}}


def _assistant(entry_id: str, parent: str | None, n: int, text: str, tool: str | None = None) -> dict:
    content: list = [{"type": "thinking", "thinking": f"thinking about {text}"}, {"type": "text", "text": text}]
    if tool:
        content.append({"type": "toolCall", "id": f"call-{entry_id}", "name": tool, "arguments": {"path": text}})
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": _ts(n),
            "message": {"role": "assistant", "content": content, "provider": "anthropic", "model": "claude-test",
                        "api": "anthropic-messages", "stopReason": "toolUse" if tool else "stop", "timestamp": _ms(n),
                        "usage": {"input": 1000 + n, "output": 50, "cacheRead": 0, "cacheWrite": 0,
                                  "totalTokens": 1050 + n,
                                  "cost": {"input": 0.003, "output": 0.001, "cacheRead": 0, "cacheWrite": 0,
                                           "total": 0.004}}}}


def _tool_result(entry_id: str, parent: str, n: int, text: str) -> dict:
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": _ts(n),
            "message": {"role": "toolResult", "toolCallId": f"call-{parent}", "toolName": "read",
                        "content": [{"type": "text", "text": text}], "isError": False, "timestamp": _ms(n)}}


def write(path: Path, session_id: str, entries: list[dict], cwd: str = "/work/viewer-test") -> Path:
    header = {"type": "session", "version": 3, "id": session_id, "timestamp": _ts(0), "cwd": cwd}
    path.write_bytes(b"".join(orjson.dumps(value) + b"\n" for value in [header, *entries]))
    return path


def hostile(path: Path) -> Path:
    """Every kind of text field holding markup, a script, a javascript: link, ANSI and bidi."""
    entries = [
        _user("h1", None, 1, HOSTILE_TEXT),
        _assistant("h2", "h1", 2, HOSTILE_TEXT, tool="read"),
        _tool_result("h3", "h2", 3, HOSTILE_TEXT + "\n" * 40 + "tail"),
        {"type": "label", "id": "h4", "parentId": "h3", "timestamp": _ts(4), "targetId": "h2", "label": HOSTILE_TEXT},
        {"type": "session_info", "id": "h5", "parentId": "h4", "timestamp": _ts(5), "name": HOSTILE_TEXT},
        # off the path (the leaf stays h7): a model named by the session, charted on /usage, and a
        # compaction whose token count is text
        {**(side := _assistant("h8", "h1", 8, "a side answer")),
         "message": {**side["message"], "provider": HOSTILE_TEXT, "model": HOSTILE_TEXT}},
        {"type": "compaction", "id": "h9", "parentId": "h8", "timestamp": _ts(9), "summary": HOSTILE_TEXT,
         "firstKeptEntryId": "h8", "tokensBefore": HOSTILE_TEXT},
        {"type": "message", "id": "h6", "parentId": "h5", "timestamp": _ts(6),
         "message": {"role": "user", "timestamp": _ms(6), "content": [
             {"type": "text", "text": "an image:"}, {"type": "image", "mimeType": "image/png", "data": PNG_1PX},
             {"type": "image", "mimeType": 'image/svg+xml"><script>x</script>', "data": "PHN2Zz4="}]}},
        _assistant("h7", "h6", 7, "</script><script>document.title='pwned'</script>"),
    ]
    return write(path, HOSTILE_ID, entries, cwd="/work/<script>cwd</script>")


def long_linear(path: Path, count: int = 5000) -> Path:
    """``count`` entries in one line of user / assistant (tool call) / tool result turns."""
    entries: list[dict] = []
    parent = None
    for n in range(count):
        entry_id = f"L{n:05d}"
        kind = n % 3
        if kind == 0:
            entry = _user(entry_id, parent, n, f"step {n}: please look at module {n % 97}")
        elif kind == 1:
            entry = _assistant(entry_id, parent, n, f"reading src/mod{n % 97}.py", tool="read")
        else:
            entry = _tool_result(entry_id, parent, n, "\n".join(f"line {i} of mod{n % 97}" for i in range(60)))
        entries.append(entry)
        parent = entry_id
    return write(path, LONG_ID, entries)


def branchy(path: Path, branches: int = 100, depth: int = 6) -> Path:
    """A trunk of ``branches`` user turns, each answered ``depth`` entries deep, and a second
    answer branching off every trunk turn (so ``branches`` branch points)."""
    entries: list[dict] = []
    n = 0
    trunk = None
    for b in range(branches):
        turn = f"T{b:03d}"
        entries.append(_user(turn, trunk, n := n + 1, f"question {b}"))
        for side in ("a", "b"):
            parent = turn
            for d in range(depth):
                entry_id = f"{turn}{side}{d}"
                make = _assistant if d % 2 == 0 else _user
                entries.append(make(entry_id, parent, n := n + 1, f"branch {side} of {b}, step {d}"))
                parent = entry_id
            if side == "a":
                trunk = parent
    return write(path, BRANCHY_ID, entries)
