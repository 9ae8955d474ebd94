"""Independent readings of raw session files, written for the tests (never through the store): the
entries Pi's loader keeps, and the sums of ``AgentSession.getSessionStats`` with usage numbers read
by the store's documented rule (odd values count as 0, where Pi would concatenate or throw; Pi's
own numbers are compared in ``test_stats_oracle``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def raw_numbered(path: Path) -> list[tuple[int, Any]]:
    """``(line index, parsed value)`` of the lines after the header line, as Pi's loader reads a
    file it opens (lines that are not JSON are skipped)."""
    values = []
    for number, line in enumerate(path.read_bytes().decode("utf-8", "replace").split("\n")):
        if not line.strip():
            continue
        try:
            values.append((number, json.loads(line)))
        except ValueError:
            continue
    return values[1:]


def raw_entries(path: Path) -> list[Any]:
    """The parsed values of :func:`raw_numbered`."""
    return [value for _, value in raw_numbered(path)]


def _truthy(value: Any) -> bool:
    """JavaScript truthiness of a parsed JSON value."""
    if value is None or value is False or value == "":
        return False
    return not (isinstance(value, (int, float)) and (value == 0 or value != value))


def _count(value: Any) -> int:
    """A token count as the store reads it: an integral number, else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return int(value) if float(value).is_integer() and abs(value) < 2**63 else 0


def pi_stats(entries: list[Any]) -> dict[str, Any]:
    """``getSessionStats``'s sums over ``entries``, usage numbers read by the store's rule."""
    stats = {"userMessages": 0, "assistantMessages": 0, "toolCalls": 0, "toolResults": 0, "totalMessages": 0,
             "input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "cost": 0.0, "records": 0}

    def add(usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        stats["records"] += 1
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            stats[key] += _count(usage.get(key))
        cost = usage.get("cost")
        total = cost.get("total") if isinstance(cost, dict) else None
        if isinstance(total, (int, float)) and not isinstance(total, bool) and abs(total) < 1e300:  # NaN: False
            stats["cost"] += total

    for entry in entries:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind == "usage" or (kind in ("branch_summary", "compaction") and _truthy(entry.get("usage"))):
            add(entry.get("usage"))
        if kind != "message":
            continue
        stats["totalMessages"] += 1
        message = entry.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            stats["userMessages"] += 1
        elif role == "toolResult":
            stats["toolResults"] += 1
            if _truthy(message.get("usage")):
                add(message.get("usage"))
        elif role == "assistant":
            stats["assistantMessages"] += 1
            content = message.get("content")
            if isinstance(content, list):
                stats["toolCalls"] += sum(isinstance(b, dict) and b.get("type") == "toolCall" for b in content)
            add(message.get("usage"))
    return stats


def _model_key(provider: Any, model: Any) -> str | None:
    """``provider/model`` as ``stats --by model`` names a row's model (None without one)."""
    provider = provider if isinstance(provider, str) else ""
    if not isinstance(model, str) or not model:
        return None
    return f"{provider}/{model}" if provider else model


def pi_activity(entries: list[Any], cwd: str) -> list[dict[str, Any]]:
    """One record per entry Pi's ``/session`` counts (every message, every usage-bearing entry):
    its day (the timestamp's first ten characters), cwd, model key, role, its tool calls as
    ``(name, failed)`` pairs (``failed``: the first later result with the call's id says
    ``isError: true``; None while unanswered) and its usage read by the store's rule."""
    records: list[dict[str, Any]] = []
    waiting: dict[str, list[list]] = {}  # tool-call id -> the unanswered calls [name, failed]
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        message = entry.get("message") if kind == "message" else None
        role = message.get("role") if isinstance(message, dict) else None
        usage = None
        model = None
        calls: list[list] = []
        if kind == "usage" or (kind in ("branch_summary", "compaction") and _truthy(entry.get("usage"))):
            usage = entry.get("usage")
            if kind == "usage":
                model = _model_key(entry.get("provider"), entry.get("model"))
        elif role == "toolResult":
            usage = message.get("usage") if _truthy(message.get("usage")) else None
            call_id = message.get("toolCallId")
            for call in waiting.pop(call_id, []) if isinstance(call_id, str) else []:
                call[1] = message.get("isError") is True
        elif role == "assistant":
            usage = message.get("usage")
            model = _model_key(message.get("provider"), message.get("model"))
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "toolCall":
                    name = block.get("name")
                    call = [name if isinstance(name, str) else None, None]
                    calls.append(call)
                    if isinstance(block.get("id"), str):
                        waiting.setdefault(block["id"], []).append(call)
        if kind != "message" and not isinstance(usage, dict):
            continue
        sums = pi_stats([{"type": "usage", "usage": usage}]) if isinstance(usage, dict) else pi_stats([])
        timestamp = entry.get("timestamp")
        records.append({"day": timestamp[:10] if isinstance(timestamp, str) else None, "timestamp": timestamp,
                        "cwd": cwd, "model": model, "message": kind == "message", "role": role, "calls": calls,
                        **{key: sums[key] for key in ("input", "output", "cacheRead", "cacheWrite", "cost")}})
    return records
