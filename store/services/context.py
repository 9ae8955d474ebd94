"""What the model sees: a root→leaf path of entries turned into context entries, a projection
that keeps the source entry of every message, and the replayed system message.

Everything here is plain Python over lists of entry dicts as ``js_parse`` returns them (the
store's path query supplies the list). The rules are Pi 1.6.0's (``session-manager.js``:
``buildContextEntries``, ``sessionEntryToContextMessages``, ``projectContextEntry``,
``buildSessionProjection``; pi-ai's ``getCurrentSystemMessage``), including what Pi does with
odd files: where Pi's code would throw on a value (``content: {}``, a message that is ``null``),
these functions raise ``TypeError`` too, so a caller can report the same failure.

Absent values are ``store.format.jsvalue.UNDEFINED`` (or simply a missing key in a message dict);
``NaN`` timestamps are ``None`` (what ``JSON.stringify`` writes for them). Use :func:`to_json`
(or ``jsonable``) before serialising a projection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from store.format.jsdate import parse_js_date
from store.format.jsvalue import UNDEFINED, map_key, truthy
from store.services._js import (
    content_text,
    get,
    is_nullish,
    js_entries,
    js_eq,
    js_iterate,
    js_object_from_entries,
    jsonable,
    utf16_len,
)

__all__ = [
    "ContextSettings",
    "ProjectedEntry",
    "Projection",
    "SessionContext",
    "build_context_entries",
    "build_session_context",
    "build_session_projection",
    "context_settings",
    "entry_time_ms",
    "entry_to_messages",
    "get_current_system_message",
    "get_current_tools",
    "project_context_entry",
    "session_path",
    "to_json",
]

EDITABLE_ROLES = frozenset({"user", "assistant", "toolResult", "custom"})
_EMPTY_CONTENT_ROLES = ("user", "assistant", "toolResult")


def _type(entry: Any) -> Any:
    return entry.get("type", UNDEFINED) if type(entry) is dict else get(entry, "type")


def _id(entry: Any) -> Any:
    return entry.get("id", UNDEFINED) if type(entry) is dict else get(entry, "id")


def _timestamp_ms(value: Any) -> int | float | None:
    """``new Date(value).getTime()``; None for NaN (an absent value included)."""
    if value is UNDEFINED:
        return None
    ms = parse_js_date(value)
    if ms is None:
        return None
    return int(ms) if ms == int(ms) else ms


def entry_time_ms(entry: Any) -> int | float | None:
    """An entry's ISO ``timestamp`` in ms, as the messages built from entries carry it."""
    return _timestamp_ms(get(entry, "timestamp"))


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not UNDEFINED:
        target[key] = value


# ---------------------------------------------------------------------------------------------
# the path


def session_path(entries: Sequence[Any], leaf_id: Any = UNDEFINED,
                 by_id: dict[tuple, Any] | None = None) -> list[Any]:
    """Pi's ``buildSessionPath``: root→leaf entries for ``leaf_id`` (None → no path; absent or
    not found → the last entry is the leaf). ``by_id`` maps ``map_key(id)`` → entry (built from
    ``entries`` when omitted: the last entry with an id wins). Stops when a parent is missing;
    a parent cycle raises ``RecursionError`` (Pi would never return)."""
    if by_id is None:
        by_id = {}
        for entry in entries:
            by_id[map_key(_id(entry))] = entry
    if leaf_id is None:
        return []
    leaf = by_id.get(map_key(leaf_id)) if truthy(leaf_id) else None
    if leaf is None:
        leaf = entries[-1] if entries else None
    if leaf is None:
        return []
    path = []
    seen: set[int] = set()
    current = leaf
    while current is not None:
        if id(current) in seen:
            raise RecursionError("parentId cycle: Pi would not terminate on this path")
        seen.add(id(current))
        path.append(current)
        parent_id = get(current, "parentId")
        current = by_id.get(map_key(parent_id)) if truthy(parent_id) else None
    path.reverse()
    return path


# ---------------------------------------------------------------------------------------------
# entries -> messages


def entry_to_messages(entry: Any) -> list[Any]:
    """The messages one context entry contributes (Pi's ``sessionEntryToContextMessages``).

    * ``message``: the stored message; null/absent content becomes ``""`` for system and ``[]``
      for user/assistant/toolResult messages.
    * ``custom_message``: ``{role: "custom", customType, content (?? []), display, details,
      timestamp}``.
    * ``branch_summary`` with a non-empty summary: ``{role: "branchSummary", summary, fromId,
      timestamp}``.
    * ``compaction``: its ``systemMessage`` checkpoint (when set), then ``{role:
      "compactionSummary", summary, tokensBefore, timestamp}``.
    * anything else: nothing.

    Timestamps of the built messages are the entry's ISO time in ms (None when not a date).
    """
    kind = _type(entry)
    if kind == "message":
        message = get(entry, "message")
        role = get(message, "role")
        if type(message) is dict and is_nullish(message.get("content", UNDEFINED)):
            if role == "system":
                copy = dict(message)
                copy["content"] = ""
                return [copy]
            if role in _EMPTY_CONTENT_ROLES:
                copy = dict(message)
                copy["content"] = []
                return [copy]
        return [message]
    if kind == "custom_message":
        content = get(entry, "content")
        custom: dict[str, Any] = {"role": "custom"}
        _put(custom, "customType", get(entry, "customType"))
        custom["content"] = [] if is_nullish(content) else content
        _put(custom, "display", get(entry, "display"))
        _put(custom, "details", get(entry, "details"))
        custom["timestamp"] = _timestamp_ms(get(entry, "timestamp"))
        return [custom]
    if kind == "branch_summary":
        summary = get(entry, "summary")
        if not truthy(summary):
            return []
        message = {"role": "branchSummary", "summary": summary}
        _put(message, "fromId", get(entry, "fromId"))
        message["timestamp"] = _timestamp_ms(get(entry, "timestamp"))
        return [message]
    if kind == "compaction":
        message = {"role": "compactionSummary"}
        _put(message, "summary", get(entry, "summary"))
        _put(message, "tokensBefore", get(entry, "tokensBefore"))
        message["timestamp"] = _timestamp_ms(get(entry, "timestamp"))
        system = get(entry, "systemMessage")
        return [system, message] if truthy(system) else [message]
    return []


def contributes_messages(entry: Any) -> bool:
    """``entry_to_messages(entry)`` is non-empty (without building the messages)."""
    kind = _type(entry)
    if kind == "message":
        get(get(entry, "message"), "role")  # Pi reads it, and throws when there is no message
        return True
    if kind in ("custom_message", "compaction"):
        return True
    if kind == "branch_summary":
        return truthy(get(entry, "summary"))
    return False


def _is_system_message_entry(entry: Any) -> bool:
    return _type(entry) == "message" and get(get(entry, "message"), "role") == "system"


def _index_with_id(path: Sequence[Any], wanted: Any, stop: int) -> int:
    """The index of the entry with id ``wanted`` in ``path[:stop]``, or -1.

    Pi takes the first such entry (``findIndex``). On a root→leaf walk ids are distinct (a
    repeated id would be a parent cycle, on which Pi never returns), so searching from ``stop``
    backwards finds the same entry while touching only the kept tail of a compacted path."""
    if isinstance(wanted, str):  # the usual case: plain string equality is ===
        for index in range(stop - 1, -1, -1):
            entry = path[index]
            if type(entry) is dict and entry.get("id") == wanted:
                return index
        return -1
    for index in range(stop - 1, -1, -1):
        if js_eq(_id(path[index]), wanted):
            return index
    return -1


def build_context_entries(path: Sequence[Any]) -> list[Any]:
    """The compaction-aware context entries of a root→leaf path (Pi's ``buildContextEntries``).

    Without a compaction on the path: the path. Otherwise the latest compaction first, then the
    path entries from its ``firstKeptEntryId`` up to it (system messages skipped: the
    compaction's checkpoint replaces them), then every entry after it. When the first kept id is
    not found before the compaction, nothing before it is kept.
    """
    compaction_at = -1
    for index in range(len(path) - 1, -1, -1):
        entry = path[index]
        if (entry.get("type") if type(entry) is dict else _type(entry)) == "compaction":
            compaction_at = index
            break
    if compaction_at < 0:
        return list(path)
    compaction = path[compaction_at]
    # Pi looks the compaction up again by id: itself, on a real path.
    first = _index_with_id(path, _id(compaction), compaction_at + 1)
    if first < 0:  # unreachable: the compaction itself matches
        return list(path)
    context = [compaction]
    kept_from = _index_with_id(path, get(compaction, "firstKeptEntryId"), first)
    if kept_from >= 0:
        for index in range(kept_from, first):
            entry = path[index]
            if not _is_system_message_entry(entry):
                context.append(entry)
    context.extend(path[first + 1:])
    return context


def project_context_entry(entry: Any, edit: Any = None) -> list[Any]:
    """The messages of one entry with its latest context edit applied (Pi's
    ``projectContextEntry``): a null replacement hides them; otherwise user, assistant,
    toolResult and custom messages get the replacement content (a string becomes one text block
    for assistant and toolResult messages); other messages stay as they are."""
    messages = entry_to_messages(entry)
    if edit is None:
        return messages
    replacement = get(edit, "replacement")
    if replacement is None:
        return []
    projected = []
    for message in messages:
        role = get(message, "role")
        if not isinstance(role, str) or role not in EDITABLE_ROLES:  # a role may be any JSON value
            projected.append(message)
            continue
        content = get(replacement, "content")
        if role in ("assistant", "toolResult") and isinstance(content, str):
            content = [{"type": "text", "text": content}]
        copy = dict(message) if isinstance(message, dict) else {}
        copy["content"] = content
        projected.append(copy)
    return projected


# ---------------------------------------------------------------------------------------------
# settings


@dataclass(slots=True)
class ContextSettings:
    """Thinking level and model restored from a full path (not only the context entries)."""

    thinking_level: Any = "off"
    model: dict[str, Any] | None = None


def context_settings(path: Sequence[Any]) -> ContextSettings:
    """The last ``thinking_level_change`` (default "off") and the last ``model_change`` or
    assistant message (``{provider, modelId}``) on the path."""
    thinking_level: Any = "off"
    model_source: Any = None  # the model_change entry or assistant message that sets the model
    from_entry = False
    for entry in path:
        if type(entry) is dict:
            kind = entry.get("type")
            if kind == "message":
                message = entry.get("message", UNDEFINED)
                if type(message) is dict:
                    if message.get("role") == "assistant":
                        model_source, from_entry = message, False
                elif get(message, "role") == "assistant":  # raises for null/absent, as Pi does
                    model_source, from_entry = message, False
            elif kind == "thinking_level_change":
                thinking_level = entry.get("thinkingLevel", UNDEFINED)
            elif kind == "model_change":
                model_source, from_entry = entry, True
            continue
        kind = _type(entry)
        if kind == "thinking_level_change":
            thinking_level = get(entry, "thinkingLevel")
        elif kind == "model_change":
            model_source, from_entry = entry, True
        elif kind == "message" and get(get(entry, "message"), "role") == "assistant":
            model_source, from_entry = get(entry, "message"), False
    model: dict[str, Any] | None = None
    if model_source is not None:
        model = {}
        _put(model, "provider", get(model_source, "provider"))
        _put(model, "modelId", get(model_source, "modelId" if from_entry else "model"))
    return ContextSettings(thinking_level, model)


# ---------------------------------------------------------------------------------------------
# the projection


@dataclass(slots=True)
class ProjectedEntry:
    """One context entry and the (edited) messages it contributes."""

    source_entry: Any
    messages: list[Any]

    @property
    def source_id(self) -> Any:
        return get(self.source_entry, "id") if not is_nullish(self.source_entry) else UNDEFINED


@dataclass(slots=True)
class Projection:
    """Pi's ``buildSessionProjection`` result: provenance-preserving model context."""

    entries: list[ProjectedEntry]
    messages: list[Any]
    thinking_level: Any = "off"
    model: dict[str, Any] | None = None

    def describe_json(self) -> dict[str, Any]:
        """describe.mjs's ``projection`` field: ``{entries: [{sourceId, messages}],
        thinkingLevel, model}`` as JSON values (ids that are absent become null)."""
        return {
            "entries": [
                {"sourceId": _source_id_json(item.source_entry), "messages": jsonable(item.messages)}
                for item in self.entries
            ],
            **_settings_json(self.thinking_level, self.model),
        }

    def context(self) -> SessionContext:
        return SessionContext(self.messages, self.thinking_level, self.model)


@dataclass(slots=True)
class SessionContext:
    """Pi's ``buildSessionContext`` result."""

    messages: list[Any] = field(default_factory=list)
    thinking_level: Any = "off"
    model: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """``{messages, thinkingLevel, model}`` as JSON values."""
        return {"messages": jsonable(self.messages), **_settings_json(self.thinking_level, self.model)}


def _source_id_json(entry: Any) -> Any:
    value = entry.get("id", UNDEFINED) if type(entry) is dict else UNDEFINED
    return None if value is UNDEFINED else jsonable(value)


def _settings_json(thinking_level: Any, model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if thinking_level is not UNDEFINED:
        out["thinkingLevel"] = jsonable(thinking_level)
    out["model"] = jsonable(model)
    return out


def build_session_projection(path: Sequence[Any], settings: ContextSettings | None = None) -> Projection:
    """Context entries with their latest context edits applied (per target, the last
    ``context_edit`` among the context entries wins); an older compaction that lies inside the
    retained range contributes no messages (only the newest, at index 0, does).

    ``settings``: thinking level and model when the caller already knows them for this path
    (a store can read them with one query); by default :func:`context_settings` scans the
    whole path, as Pi does, which is then the only part that is not proportional to the context.
    """
    if settings is None:
        settings = context_settings(path)
    context_entries = build_context_entries(path)
    edits: dict[tuple, Any] = {}
    for entry in context_entries:
        if (entry.get("type") if type(entry) is dict else _type(entry)) == "context_edit":
            edits[map_key(get(entry, "targetId"))] = entry
    projected: list[ProjectedEntry] = []
    messages: list[Any] = []
    for index, entry in enumerate(context_entries):
        if type(entry) is dict:
            kind = entry.get("type")
            if kind == "message" and not edits:  # the common case, without the general machinery
                message = entry.get("message")
                if type(message) is dict and message.get("content") is not None:
                    items = [message]
                    projected.append(ProjectedEntry(entry, items))
                    messages.append(message)
                    continue
        else:
            kind = _type(entry)
        if index > 0 and kind == "compaction":
            items = []
        else:
            edit = edits.get(map_key(_id(entry))) if edits else None
            items = project_context_entry(entry, edit)
        projected.append(ProjectedEntry(entry, items))
        messages.extend(items)
    return Projection(projected, messages, settings.thinking_level, settings.model)


def build_session_context(path: Sequence[Any]) -> SessionContext:
    """The finalized model context: the projection's messages, thinking level and model."""
    return build_session_projection(path).context()


def to_json(value: Any) -> Any:
    """A projection, context or message list as the JSON values Pi would serialise."""
    if isinstance(value, Projection):
        return value.describe_json()
    if isinstance(value, SessionContext):
        return value.to_json()
    return jsonable(value)


# ---------------------------------------------------------------------------------------------
# system replay (pi-ai's getCurrentTools / getCurrentSystemMessage)


def _is_system(message: Any) -> bool:
    return get(message, "role") == "system"


def get_current_tools(messages: Sequence[Any]) -> list[Any]:
    """The tools declared after replaying every system message: per message, ``toolsRemoved``
    (by name) then ``toolsAdded`` (a later declaration of a name replaces the earlier one and
    keeps its position)."""
    tools: dict[tuple, Any] = {}
    for message in messages:
        if not _is_system(message):
            continue
        removed = get(message, "toolsRemoved")
        for tool in ([] if is_nullish(removed) else js_iterate(removed)):
            tools.pop(map_key(get(tool, "name")), None)
        added = get(message, "toolsAdded")
        for tool in ([] if is_nullish(added) else js_iterate(added)):
            tools[map_key(get(tool, "name"))] = tool
    return list(tools.values())


def get_current_system_message(messages: Sequence[Any]) -> dict[str, Any] | None:
    """One system message holding the prompt and tools in force after all system messages:
    non-empty texts joined by blank lines, ``sections`` patched by name (null deletes; JavaScript
    property order: integer-like names first), tools resolved, the timestamp of the first system
    message that has one (0 when it is null). None when there is no system message with a
    timestamp and no tool — exactly pi-ai's rule, odd as it is for timestamp-less messages."""
    content: list[str] = []
    sections: dict[str, Any] = {}
    timestamp: Any = UNDEFINED
    for message in messages:
        if not _is_system(message):
            continue
        if is_nullish(timestamp):
            timestamp = get(message, "timestamp")
        text = content_text(get(message, "content"))
        if utf16_len(text) > 0:
            content.append(text)
        patch = get(message, "sections")
        for name, value in ([] if is_nullish(patch) else js_entries(patch)):
            if value is None:
                sections.pop(name, None)
            else:
                sections[name] = value
    tools = get_current_tools(messages)
    if timestamp is UNDEFINED and not tools:
        return None
    result: dict[str, Any] = {"role": "system", "content": "\n\n".join(content)}
    if sections:
        result["sections"] = js_object_from_entries(sections.items())
    if tools:
        result["toolsAdded"] = tools
    result["timestamp"] = 0 if is_nullish(timestamp) else timestamp
    return result
