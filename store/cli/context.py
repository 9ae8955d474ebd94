"""``pi-store compact``: plan or run a compaction at a session's leaf."""

from __future__ import annotations

import click

from store import services
from store.cli.app import current_store, emit, main
from store.format.jsvalue import prop

SUMMARIZERS = ("openai", "deterministic")


@main.command("compact")
@click.argument("session")
@click.option("--keep-recent", type=click.IntRange(0),
              default=services.CompactionSettings().keep_recent_tokens,
              show_default=True, help="Tokens of recent context kept verbatim.")
@click.option("--reserve", type=click.IntRange(0),
              default=services.CompactionSettings().reserve_tokens, show_default=True,
              help="Tokens reserved for the summary and the next answer.")
@click.option("--dry-run", is_flag=True, help="Print the plan (kept, summarised, tokens) and store nothing.")
@click.option("--summarizer", type=click.Choice(SUMMARIZERS), default="openai", show_default=True,
              help="openai: any OpenAI-compatible server (PI_STORE_SUMMARY_BASE_URL, PI_STORE_SUMMARY_MODEL, "
                   "PI_STORE_SUMMARY_API_KEY); deterministic: a model-free digest, for trying things out.")
def compact_command(session: str, keep_recent: int, reserve: int, dry_run: bool, summarizer: str) -> None:
    """Summarise the older part of a session's context into a compaction entry."""
    settings = services.CompactionSettings(reserve_tokens=reserve, keep_recent_tokens=keep_recent)
    try:
        manager = current_store().open(session)
        path = manager.context_path()
        preparation = services.prepare_compaction(path, settings)
        if preparation is None:
            emit({"sessionId": session, "compacted": False, "reason": "nothing to summarise"})
            return
        if dry_run:
            ids = [prop(entry, "id") for entry in path]
            first_kept = ids.index(preparation.first_kept_entry_id) if preparation.first_kept_entry_id in ids else None
            emit({
                "sessionId": session, "dryRun": True, "plan": preparation.describe_json(),
                "keptEntryIds": ids[first_kept:] if first_kept is not None else [],
            })
            return
        engine = (services.DeterministicSummarizer() if summarizer == "deterministic"
                  else services.OpenAICompatibleSummarizer.from_env())
        entry_id = manager.compact(engine, settings)
    except (services.SummaryFailed, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    emit({"sessionId": session, "compacted": True, "compactionId": entry_id,
          "tokensBefore": preparation.tokens_before, "firstKeptEntryId": preparation.first_kept_entry_id})
