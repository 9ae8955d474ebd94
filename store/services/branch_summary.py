"""Branch summaries: when the user moves the leaf elsewhere in the tree, the branch being left
can be summarised into a ``branch_summary`` entry at the new position (Pi 1.6.0's
``branch-summarization.js`` rules; the prompt texts are our own).

1. :func:`collect_entries_for_branch_summary` — the entries from the old leaf back to the
   deepest common ancestor with the target (compactions and earlier summaries included).
2. :func:`prepare_branch_entries` — their messages newest first within a token budget (the
   context window minus the reserve); a summary that does not fit is still taken while less than
   90% of the budget is used; file operations come from every entry, including the details of
   earlier (non-hook) branch summaries.
3. :func:`generate_branch_summary` — one summary request; a failed response raises
   :class:`~store.services.compaction.SummaryFailed`.

The result carries what ``branch_with_summary`` stores: summary, details, usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from store.format.jsvalue import UNDEFINED, map_key, truthy
from store.services._js import get, js_add, js_gt, jsonable
from store.services.compaction import (
    SUMMARY_SYSTEM_PROMPT,
    FileOps,
    check_response,
    compute_file_lists,
    extract_file_ops_from_message,
    format_file_operations,
    output_caps,
    serialize_conversation,
)
from store.services.context import entry_time_ms, entry_to_messages, project_context_entry
from store.services.estimates import estimate_tokens
from store.services.summarizers import Summarizer

__all__ = [
    "BRANCH_SUMMARY_PROMPT",
    "BranchPreparation",
    "BranchSummaryResult",
    "collect_entries_for_branch_summary",
    "generate_branch_summary",
    "prepare_branch_entries",
    "summarize_branch",
]

DEFAULT_CONTEXT_WINDOW = 128000
DEFAULT_RESERVE_TOKENS = 16384

BRANCH_SUMMARY_PROMPT = """\
Write a checkpoint of the conversation branch above. The user has left this branch and gone back \
to an earlier point; the checkpoint is what they will have of it if they return, or want to reuse \
its results elsewhere. Use these headings, in this order:

## Goal
What the user wanted to achieve in this branch.

## User decisions and constraints
Choices the user made and requirements or preferences they stated.

## Progress
What was finished, what was started but left unfinished, and what was blocked.

## Key files and resources
Exact file paths, identifiers, commands and ids that matter, copied verbatim.

## Unverified conclusions
Assumptions and results that were not checked, marked as such.

## Failures
Errors, failed attempts and dead ends, with the exact error text where it matters.

## Next steps
What would have to happen next to continue this work.

Write "(none)" under a heading that has nothing to report. Be brief and factual, and do not add \
anything the conversation does not show."""

_BRANCH_PREAMBLE = (
    "The user worked on another branch of this conversation and came back. What happened there:\n\n")
_NOTHING_TO_SUMMARIZE = "Nothing to summarize."


def _id(entry: Any) -> Any:
    return get(entry, "id")


def collect_entries_for_branch_summary(old_path: Sequence[Any],
                                       target_path: Sequence[Any]) -> tuple[list[Any], Any]:
    """``(entries, common_ancestor_id)``: the entries of ``old_path`` (root→old leaf) after the
    deepest entry it shares with ``target_path`` (root→target), oldest first."""
    if not old_path:
        return [], None
    old_ids = {map_key(_id(entry)) for entry in old_path}
    common: Any = None
    for entry in reversed(target_path):
        if map_key(_id(entry)) in old_ids:
            common = _id(entry)
            break
    entries = []
    for entry in reversed(old_path):
        if common is not None and map_key(_id(entry)) == map_key(common):
            break
        entries.append(entry)
    entries.reverse()
    return entries, common


def _summary_input(entry: Any, edit: Any) -> Any:
    """The one message an entry gives a branch summary, or UNDEFINED (Pi's getMessageFromEntry)."""
    kind = get(entry, "type")
    if kind == "message":
        if get(get(entry, "message"), "role") == "toolResult":
            return UNDEFINED  # the tool call in the assistant message carries the context
        if edit is not None:
            projected = project_context_entry(entry, edit)
            return projected[0] if projected else UNDEFINED
        return get(entry, "message")
    if kind == "custom_message":
        if edit is not None:
            projected = project_context_entry(entry, edit)
            return projected[0] if projected else UNDEFINED
        message = {"role": "custom"}
        for key in ("customType", "content", "display", "details"):  # content without `?? []`
            value = get(entry, key)
            if value is not UNDEFINED:
                message[key] = value
        message["timestamp"] = entry_time_ms(entry)
        return message
    if kind == "branch_summary":  # even with an empty summary, unlike the context
        message = {"role": "branchSummary"}
        for key in ("summary", "fromId"):
            value = get(entry, key)
            if value is not UNDEFINED:
                message[key] = value
        message["timestamp"] = entry_time_ms(entry)
        return message
    if kind == "compaction":
        messages = entry_to_messages(entry)
        return messages[-1]  # the summary message, without the system checkpoint
    return UNDEFINED


@dataclass(slots=True)
class BranchPreparation:
    """Messages chosen for a branch summary (oldest first), file operations, their tokens."""

    messages: list[Any]
    file_ops: FileOps = field(default_factory=FileOps)
    total_tokens: Any = 0


def prepare_branch_entries(entries: Sequence[Any], token_budget: int = 0) -> BranchPreparation:
    """Walk ``entries`` (oldest first) from the newest, keeping messages until ``token_budget``
    (0: no limit) would be exceeded."""
    file_ops = FileOps()
    for entry in entries:
        if get(entry, "type") == "branch_summary" and not truthy(get(entry, "fromHook")):
            details = get(entry, "details")
            if not truthy(details):
                continue
            read_files = get(details, "readFiles")
            if isinstance(read_files, list):
                for path in read_files:
                    file_ops.read.add(path)
            modified_files = get(details, "modifiedFiles")
            if isinstance(modified_files, list):
                for path in modified_files:
                    file_ops.edited.add(path)
    edits: dict[tuple, Any] = {}
    for entry in entries:
        if get(entry, "type") == "context_edit":
            edits[map_key(get(entry, "targetId"))] = entry
    messages: list[Any] = []
    total: Any = 0
    for entry in reversed(entries):
        message = _summary_input(entry, edits.get(map_key(get(entry, "id"))))
        if message is UNDEFINED:
            continue
        extract_file_ops_from_message(message, file_ops)
        tokens = estimate_tokens(message)
        if token_budget > 0 and js_gt(js_add(total, tokens), token_budget):
            if get(entry, "type") in ("compaction", "branch_summary") and js_gt(token_budget * 0.9, total):
                messages.append(message)
                total = js_add(total, tokens)
            break
        messages.append(message)
        total = js_add(total, tokens)
    messages.reverse()
    return BranchPreparation(messages, file_ops, total)


@dataclass(slots=True)
class BranchSummaryResult:
    """What ``branch_with_summary`` stores: ``summary``, ``details`` (``{readFiles,
    modifiedFiles}``) and ``usage`` (None when no request was made)."""

    summary: str
    details: dict[str, Any] | None
    usage: dict[str, Any] | None
    from_id: Any = None  # the leaf that was left (the entry's fromId), when known

    def to_json(self) -> dict[str, Any]:
        return jsonable({"summary": self.summary, "details": self.details, "usage": self.usage})


def generate_branch_summary(entries: Sequence[Any], summarizer: Summarizer, *,
                            context_window: int | None = None, reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
                            model_max_tokens: int | None = None, custom_instructions: str | None = None,
                            replace_instructions: bool = False) -> BranchSummaryResult:
    """Summarise the entries of an abandoned branch (oldest first). The budget for the
    transcript is ``context_window - reserve_tokens`` (window 128000 when not given)."""
    window = context_window or DEFAULT_CONTEXT_WINDOW
    prepared = prepare_branch_entries(entries, window - reserve_tokens)
    if not prepared.messages:  # (Pi stores its file lists, empty, all the same)
        return BranchSummaryResult(_NOTHING_TO_SUMMARIZE, {"readFiles": [], "modifiedFiles": []}, None)
    if replace_instructions and custom_instructions:
        instructions = custom_instructions
    elif custom_instructions:
        instructions = f"{BRANCH_SUMMARY_PROMPT}\n\nAlso pay particular attention to: {custom_instructions}"
    else:
        instructions = BRANCH_SUMMARY_PROMPT
    prompt = f"<conversation>\n{serialize_conversation(prepared.messages)}\n</conversation>\n\n{instructions}"
    cap, _ = output_caps(reserve_tokens, model_max_tokens)
    response = summarizer.summarize(SUMMARY_SYSTEM_PROMPT, prompt, cap)
    text = check_response(response, "Branch summary")
    read_files, modified_files = compute_file_lists(prepared.file_ops)
    summary = _BRANCH_PREAMBLE + text + format_file_operations(read_files, modified_files)
    return BranchSummaryResult(summary, {"readFiles": read_files, "modifiedFiles": modified_files},
                               response.usage)


def summarize_branch(old_path: Sequence[Any], target_path: Sequence[Any], summarizer: Summarizer,
                     **options: Any) -> BranchSummaryResult:
    """Collect, prepare and summarise the branch left when moving from the end of ``old_path``
    to the end of ``target_path``; ``from_id`` is the old leaf's id (Pi's ``fromId``)."""
    entries, _ = collect_entries_for_branch_summary(old_path, target_path)
    result = generate_branch_summary(entries, summarizer, **options)
    result.from_id = get(old_path[-1], "id") if old_path else "root"
    return result
