"""``pi-store compact``: plan or run a compaction at a session's leaf.

By default it prints a short summary for a person (what is summarised, what is kept from which
entry, tokens before and after); ``--json`` prints the whole document (``plan``: describe.mjs's
``summarizePrep`` shape).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from store import services
from store.cli.app import current_store, emit, main
from store.cli.output import plural
from store.format.jsvalue import prop

SUMMARIZERS = ("openai", "deterministic")


@main.command("compact")
@click.argument("session")
@click.option("--keep-recent", type=click.IntRange(0),
              default=services.CompactionSettings().keep_recent_tokens,
              show_default=True, help="Tokens of recent context kept verbatim.")
@click.option("--reserve", type=click.IntRange(services.MIN_RESERVE_TOKENS),
              default=services.CompactionSettings().reserve_tokens, show_default=True,
              help="Tokens reserved for the summary and the next answer: the summary's output cap is 80% of "
                   "them (50% for a split turn's start), so at least 2.")
@click.option("--dry-run", is_flag=True, help="Print the plan (kept, summarised, tokens) and store nothing.")
@click.option("--summarizer", type=click.Choice(SUMMARIZERS), default="openai", show_default=True,
              help="openai: any OpenAI-compatible server (PI_STORE_SUMMARY_BASE_URL, PI_STORE_SUMMARY_MODEL, "
                   "PI_STORE_SUMMARY_API_KEY); deterministic: a model-free digest, for trying things out.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the whole document (the plan in describe.mjs's summarizePrep shape) as JSON.")
def compact_command(session: str, keep_recent: int, reserve: int, dry_run: bool, summarizer: str,
                    as_json: bool) -> None:
    """Summarise the older part of a session's context into a compaction entry."""
    settings = services.CompactionSettings(reserve_tokens=reserve, keep_recent_tokens=keep_recent)
    try:
        manager = current_store(reading=dry_run).open(session)
        path = manager.context_path()
        projection = services.build_session_projection(path)
        preparation = services.prepare_compaction(path, settings, projection)
        if preparation is None:
            _show({"sessionId": session, "compacted": False, "reason": "nothing to summarise"}, as_json,
                  [f"{session}: nothing to summarise (the context ends in a compaction, or all of it is recent)"])
            return
        ids = [prop(entry, "id") for entry in path]
        first_kept = ids.index(preparation.first_kept_entry_id) if preparation.first_kept_entry_id in ids else None
        kept_ids = ids[first_kept:] if first_kept is not None else []
        kept_tokens = _kept_tokens(projection, preparation.first_kept_entry_id)
        if dry_run:
            doc = {"sessionId": session, "dryRun": True, "plan": preparation.describe_json(),
                   "keptEntryIds": kept_ids, "keptTokens": kept_tokens}
            before, kept = _count(preparation.tokens_before), _count(kept_tokens)
            _show(doc, as_json, [f"{session}: dry run, nothing stored", *_plan_lines(preparation, kept_ids),
                                 f"  tokens      {before} before, ~{kept} kept verbatim (plus the summary) after"])
            return
        engine = (services.DeterministicSummarizer() if summarizer == "deterministic"
                  else services.OpenAICompatibleSummarizer.from_env())
        entry_id = manager.compact(engine, settings)
        after = manager.context_path()
        tokens_after = services.estimate_projected_context_tokens(services.build_session_projection(after), after)
    except (services.SummaryFailed, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    doc = {"sessionId": session, "compacted": True, "compactionId": entry_id,
           "tokensBefore": preparation.tokens_before, "tokensAfter": tokens_after.tokens,
           "firstKeptEntryId": preparation.first_kept_entry_id}
    before, after_count = _count(preparation.tokens_before), _count(tokens_after.tokens)
    _show(doc, as_json, [f"{session}: compaction {entry_id} appended", *_plan_lines(preparation, kept_ids),
                         f"  tokens      {before} before, {after_count} after"])


def _count(tokens: Any) -> str:
    """A token estimate for people: a number with thousands separators; else as it came (Pi's
    estimate adds up what usage says, and a file's ``totalTokens`` may be a string: ``"1004"``)."""
    return f"{tokens:,}" if isinstance(tokens, int | float) and not isinstance(tokens, bool) else str(tokens)


def _show(doc: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        emit(doc)
    else:
        click.echo("\n".join(lines))


def _kept_tokens(projection: services.Projection, first_kept_id: Any) -> int:
    """The estimated tokens of the messages kept verbatim (from the first kept entry on)."""
    index = next((i for i, item in enumerate(projection.entries) if item.source_id == first_kept_id),
                 len(projection.entries))
    return sum(services.estimate_tokens(m) for item in projection.entries[index:] for m in item.messages)


def _roles(messages: list[Any]) -> str:
    counts = Counter(str(m.get("role")) if isinstance(m, dict) else "?" for m in messages)
    return ", ".join(f"{role} {count}" for role, count in counts.most_common())


def _plan_lines(preparation: services.CompactionPreparation, kept_ids: list[Any]) -> list[str]:
    """What is summarised and what is kept, a line each."""
    summarised = preparation.messages_to_summarize
    lines = [f"  summarised  {plural(len(summarised), 'message')} ({_roles(summarised) or 'none'})"]
    if preparation.is_split_turn:
        prefix = preparation.turn_prefix_messages
        lines.append(f"              and {plural(len(prefix), 'message')} of the current turn, which is split")
    if preparation.previous_summary is not None:
        lines.append("              with the previous compaction's summary")
    lines.append(f"  kept        {plural(len(kept_ids), 'entry', 'entries')} from {preparation.first_kept_entry_id}"
                 " (the first kept entry) to the leaf")
    read, modified = services.compute_file_lists(preparation.file_ops)
    if read or modified:
        lines.append(f"  files       {len(read):,} read, {len(modified):,} modified")
    return lines
