"""The session file format: JavaScript-exact JSON, dates, raw lines, migration, typed models.

The typed models (``store.format.models``, pydantic) are imported when one is first asked for,
so the JSON, date and line helpers stay cheap to import.
"""

from typing import TYPE_CHECKING, Any

from store.format.jsdate import js_iso, parse_js_date
from store.format.jsjson import JsonLineError, js_number, js_parse, js_string, js_stringify
from store.format.lines import RawLine, decode_line, iter_lines
from store.format.migrate import (
    CURRENT_SESSION_VERSION,
    MigrationError,
    migrate_entries,
    needs_migration,
    session_version,
)

if TYPE_CHECKING:  # the pydantic models load on first use (pydantic is slow to import)
    from store.format.models import (
        AgentMessage,
        AssistantMessage,
        BashExecutionMessage,
        BranchSummaryEntry,
        CompactionEntry,
        ContentBlock,
        ContextEditEntry,
        ContextReplacement,
        Cost,
        CustomEntry,
        CustomMessage,
        CustomMessageEntry,
        ImageContent,
        LabelEntry,
        MessageEntry,
        ModelChangeEntry,
        SessionEntry,
        SessionHeader,
        SessionInfoEntry,
        SystemMessage,
        TextContent,
        ThinkingContent,
        ThinkingLevelChangeEntry,
        ToolCall,
        ToolResultMessage,
        UnknownContent,
        UnknownEntry,
        UnknownMessage,
        Usage,
        UsageEntry,
        UserMessage,
        entry_to_dict,
        parse_entry,
    )

_MODELS = frozenset({
    "AgentMessage",
    "AssistantMessage",
    "BashExecutionMessage",
    "BranchSummaryEntry",
    "CompactionEntry",
    "ContentBlock",
    "ContextEditEntry",
    "ContextReplacement",
    "Cost",
    "CustomEntry",
    "CustomMessage",
    "CustomMessageEntry",
    "ImageContent",
    "LabelEntry",
    "MessageEntry",
    "ModelChangeEntry",
    "SessionEntry",
    "SessionHeader",
    "SessionInfoEntry",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ThinkingLevelChangeEntry",
    "ToolCall",
    "ToolResultMessage",
    "UnknownContent",
    "UnknownEntry",
    "UnknownMessage",
    "Usage",
    "UsageEntry",
    "UserMessage",
    "entry_to_dict",
    "parse_entry",
})

__all__ = [
    "CURRENT_SESSION_VERSION",
    "AgentMessage",
    "AssistantMessage",
    "BashExecutionMessage",
    "BranchSummaryEntry",
    "CompactionEntry",
    "ContentBlock",
    "ContextEditEntry",
    "ContextReplacement",
    "Cost",
    "CustomEntry",
    "CustomMessage",
    "CustomMessageEntry",
    "ImageContent",
    "JsonLineError",
    "LabelEntry",
    "MessageEntry",
    "MigrationError",
    "ModelChangeEntry",
    "RawLine",
    "SessionEntry",
    "SessionHeader",
    "SessionInfoEntry",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ThinkingLevelChangeEntry",
    "ToolCall",
    "ToolResultMessage",
    "UnknownContent",
    "UnknownEntry",
    "UnknownMessage",
    "Usage",
    "UsageEntry",
    "UserMessage",
    "decode_line",
    "entry_to_dict",
    "iter_lines",
    "js_iso",
    "js_number",
    "js_parse",
    "js_string",
    "js_stringify",
    "migrate_entries",
    "needs_migration",
    "parse_entry",
    "parse_js_date",
    "session_version",
]


def __getattr__(name: str) -> Any:
    """A model of ``store.format.models``, imported when first asked for."""
    if name not in _MODELS:
        raise AttributeError(f"module 'store.format' has no attribute {name!r}")
    from store.format import models

    value = getattr(models, name)
    globals()[name] = value
    return value
