"""Independent readings of raw session files, written for the tests (never through the store): the
entries Pi's loader keeps, and the sums of ``AgentSession.getSessionStats`` with usage numbers read
by the store's documented rule (odd values count as 0, where Pi would concatenate or throw; Pi's
own numbers are compared in ``test_stats_oracle``)."""

from __future__ import annotations

import json
import math
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
        if isinstance(total, (int, float)) and not isinstance(total, bool) and math.isfinite(total):
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
