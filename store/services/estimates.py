"""Token estimates and the compaction trigger, as Pi 1.6.0 computes them (``compaction.js``:
``estimateTokens``, ``estimateContextTokens``, ``estimateProjectedContextTokens``,
``shouldCompact``, ``DEFAULT_COMPACTION_SETTINGS``).

An estimate is ``ceil(chars / 4)`` where chars are JavaScript string lengths (UTF-16 code units)
and ``JSON.stringify`` lengths for tool arguments and tool declarations; it is a heuristic, not a
tokenizer. Where a stored value is not what Pi expects, the arithmetic follows JavaScript: a
missing string throws (``TypeError``), a number where a string was expected gives ``NaN``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from store.format.jsvalue import UNDEFINED, truthy
from store.services._js import (
    NAN,
    get,
    js_add,
    js_ceil,
    js_eq,
    js_gt,
    js_iterate,
    js_to_number,
    js_values,
    json_length,
    jsonable,
    utf16_len,
)
from store.services.context import Projection, get_current_system_message

__all__ = [
    "ESTIMATED_IMAGE_CHARS",
    "CompactionSettings",
    "ContextEstimate",
    "assistant_usage",
    "calculate_context_tokens",
    "estimate_context_tokens",
    "estimate_projected_context_tokens",
    "estimate_tokens",
    "should_compact",
]

ESTIMATED_IMAGE_CHARS = 4800


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """Pi's compaction settings; the defaults are ``DEFAULT_COMPACTION_SETTINGS``."""

    enabled: bool = True
    reserve_tokens: int = 16384
    keep_recent_tokens: int = 20000

    def to_json(self) -> dict[str, Any]:
        """Pi's shape: ``{enabled, reserveTokens, keepRecentTokens}``."""
        return {"enabled": self.enabled, "reserveTokens": self.reserve_tokens,
                "keepRecentTokens": self.keep_recent_tokens}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> CompactionSettings:
        default = cls()
        return cls(
            enabled=value.get("enabled", default.enabled),
            reserve_tokens=value.get("reserveTokens", default.reserve_tokens),
            keep_recent_tokens=value.get("keepRecentTokens", default.keep_recent_tokens),
        )


def should_compact(context_tokens: Any, context_window: Any, settings: CompactionSettings) -> bool:
    """Compaction is due when enabled and ``tokens > window - reserve`` (strictly greater)."""
    if not settings.enabled:
        return False
    return js_gt(context_tokens, js_to_number(context_window) - js_to_number(settings.reserve_tokens))


# ---------------------------------------------------------------------------------------------
# one message


def _length(value: Any) -> Any:
    """``value.length`` as an addend: TypeError on null/undefined, NaN when there is none."""
    if isinstance(value, str):
        return utf16_len(value)
    length = get(value, "length")
    return NAN if length is UNDEFINED else length


def _content_chars(content: Any) -> Any:
    """Characters of a string or of the text and image blocks of a content array."""
    if isinstance(content, str):
        return utf16_len(content)
    chars: Any = 0
    for block in js_iterate(content):
        kind = get(block, "type")
        if kind == "text":
            text = get(block, "text")
            if truthy(text):
                chars = js_add(chars, _length(text))
        elif kind == "image":
            chars = js_add(chars, ESTIMATED_IMAGE_CHARS)
    return chars


def _tokens(chars: Any) -> Any:
    """``Math.ceil(chars / 4)``."""
    return js_ceil(js_to_number(chars) / 4)


def estimate_tokens(message: Any) -> Any:
    """``ceil(chars / 4)`` for one message (an int; NaN where JavaScript's arithmetic gives NaN).

    * system: content + every non-empty section + ``JSON.stringify(toolsAdded)``
    * user, custom, toolResult: text (+4800 per image)
    * assistant: text + thinking + per tool call ``name + JSON.stringify(arguments)``
    * bashExecution: command + output; branchSummary, compactionSummary: the summary
    * any other role: 0
    """
    role = get(message, "role")
    chars: Any = 0
    if role == "system":
        chars = _content_chars(get(message, "content"))
        sections = get(message, "sections")
        if truthy(sections):
            for section in js_values(sections):
                if truthy(section):
                    chars = js_add(chars, _length(section))
        tools = get(message, "toolsAdded")
        if truthy(tools):
            chars = js_add(chars, json_length(tools))
    elif role in ("user", "custom", "toolResult"):
        chars = _content_chars(get(message, "content"))
    elif role == "assistant":
        for block in js_iterate(get(message, "content")):
            kind = get(block, "type")
            if kind == "text":
                chars = js_add(chars, _length(get(block, "text")))
            elif kind == "thinking":
                chars = js_add(chars, _length(get(block, "thinking")))
            elif kind == "toolCall":
                name_length = _length(get(block, "name"))
                chars = js_add(chars, js_add(name_length, json_length(get(block, "arguments"))))
    elif role == "bashExecution":
        chars = js_add(_length(get(message, "command")), _length(get(message, "output")))
    elif role in ("branchSummary", "compactionSummary"):
        chars = _length(get(message, "summary"))
    else:
        return 0
    return _tokens(chars)


# ---------------------------------------------------------------------------------------------
# a context


@dataclass(frozen=True, slots=True)
class ContextEstimate:
    """Pi's context estimate: the last valid assistant usage plus estimates of what follows."""

    tokens: Any
    usage_tokens: Any
    trailing_tokens: Any
    last_usage_index: int | None

    def to_json(self) -> dict[str, Any]:
        return jsonable({"tokens": self.tokens, "usageTokens": self.usage_tokens,
                         "trailingTokens": self.trailing_tokens, "lastUsageIndex": self.last_usage_index})


def calculate_context_tokens(usage: Any) -> Any:
    """``totalTokens``, or (when it is 0 or missing) input + output + cacheRead + cacheWrite."""
    total = get(usage, "totalTokens")
    if truthy(total):
        return total
    value = js_add(get(usage, "input"), get(usage, "output"))
    value = js_add(value, get(usage, "cacheRead"))
    return js_add(value, get(usage, "cacheWrite"))


def assistant_usage(message: Any) -> Any:
    """The usage of an assistant message when it counts (not error/aborted, non-zero total)."""
    if get(message, "role") != "assistant" or not isinstance(message, dict) or "usage" not in message:
        return None
    stop = message.get("stopReason", UNDEFINED)
    if js_eq(stop, "aborted") or js_eq(stop, "error"):
        return None
    usage = message["usage"]
    if not truthy(usage) or not js_gt(calculate_context_tokens(usage), 0):
        return None
    return usage


def estimate_context_tokens(messages: Sequence[Any]) -> ContextEstimate:
    """The last valid assistant usage plus the estimates of the messages after it; without one,
    the sum of all estimates."""
    usage = None
    index = len(messages) - 1
    while index >= 0:
        usage = assistant_usage(messages[index])
        if usage is not None:
            break
        index -= 1
    if usage is None:
        estimated: Any = 0
        for message in messages:
            estimated = js_add(estimated, estimate_tokens(message))
        return ContextEstimate(estimated, 0, estimated, None)
    usage_tokens = calculate_context_tokens(usage)
    trailing: Any = 0
    for message in messages[index + 1:]:
        trailing = js_add(trailing, estimate_tokens(message))
    return ContextEstimate(js_add(usage_tokens, trailing), usage_tokens, trailing, index)


def estimate_projected_context_tokens(projection: Projection, branch: Sequence[Any]) -> ContextEstimate:
    """The context estimate of a projection, trusting the last usage only when its source entry
    comes after the latest ``context_edit`` or ``compaction`` on the branch; otherwise the
    replayed system message once plus every non-system projected message."""
    estimate = estimate_context_tokens(projection.messages)
    if estimate.last_usage_index is not None:
        # The source entry of the usage's message (searched from the end, where it usually is).
        usage_entry_id: Any = UNDEFINED
        following = len(projection.messages)
        for item in reversed(projection.entries):
            position = following - len(item.messages)
            if position <= estimate.last_usage_index < following:
                usage_entry_id = get(item.source_entry, "id")
                break
            following = position
        latest_invalidating = -1
        for i in range(len(branch) - 1, -1, -1):
            entry = branch[i]
            if (entry.get("type") if type(entry) is dict else get(entry, "type")) in ("context_edit", "compaction"):
                latest_invalidating = i
                break
        # Pi compares the index of the usage's entry on the branch (findIndex) with the latest
        # invalidating entry. Ids on a root→leaf path are distinct, so it is enough to look for
        # the usage's entry after that point, from the end.
        if truthy(usage_entry_id):
            for i in range(len(branch) - 1, latest_invalidating, -1):
                if js_eq(get(branch[i], "id"), usage_entry_id):
                    return estimate
    system = get_current_system_message(projection.messages)
    tokens: Any = estimate_tokens(system) if system is not None else 0
    for message in projection.messages:
        if get(message, "role") != "system":
            tokens = js_add(tokens, estimate_tokens(message))
    return ContextEstimate(tokens, 0, tokens, None)

