"""``pi-store sql``, ``search``, ``stats`` and ``fts`` (the analysis surface, ``docs/sql.md``)."""

from __future__ import annotations

import sys

import click

from store.analysis import fts
from store.analysis.backfill import recompute_analysis
from store.analysis.readonly import DEFAULT_TIMEOUT, stream_sql, write_csv, write_json, write_table
from store.analysis.search import SearchHit, search
from store.analysis.stats import SessionStats, session_stats
from store.cli.app import current_store, emit, main
from store.db.engine import write_transaction


@main.command("sql")
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of row objects.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")
@click.option("--timeout", type=click.FloatRange(min=0), default=DEFAULT_TIMEOUT, show_default=True,
              help="Stop the statement after SECONDS, until its last row is printed (0: no limit).")
def sql_command(query: str, as_json: bool, as_csv: bool, timeout: float) -> None:
    """Run one read-only SQL statement (views: docs/sql.md) and print the rows as they come."""
    with stream_sql(current_store().engine, query, timeout=timeout) as rows:
        write = write_json if as_json else write_csv if as_csv else write_table
        write(rows.columns, rows, sys.stdout)


@main.command("search")
@click.argument("query")
@click.option("--session", help="Only this session.")
@click.option("--role", help="Only this message role (user, assistant, toolResult, ...) or entry type.")
@click.option("--path-only", is_flag=True, help="Only entries on their session's current path.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1), help="Most hits to print.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of hits.")
def search_command(query: str, session: str | None, role: str | None, path_only: bool, limit: int,
                   as_json: bool) -> None:
    """Full-text search: words, "phrases", prefix*, -excluded, OR. Newest hits first."""
    hits = search(current_store().engine, query, session=session, role=role, path_only=path_only, limit=limit)
    if as_json:
        emit([hit.to_json() for hit in hits])
        return
    for hit in hits:
        click.echo(_hit_line(hit))


def _hit_line(hit: SearchHit) -> str:
    where = hit.provenance.branch + (f", {hit.provenance.compaction} compaction" if hit.provenance.compaction else "")
    if hit.provenance.edited:
        where += f", {hit.provenance.edited}"
    snippet = " ".join(hit.snippet.split())
    return f"{hit.entry_id}  {hit.session_id}  {hit.role or hit.type}  {hit.timestamp or '-'}  [{where}]  {snippet}"


@main.command("stats")
@click.argument("session", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def stats_command(session: str | None, as_json: bool) -> None:
    """Messages, tool calls, tokens and cost of a session (all sessions without SESSION), per model."""
    stats = session_stats(current_store().engine, session)
    if as_json:
        emit(stats.to_json())
        return
    click.echo(_stats_text(stats))


def _stats_text(stats: SessionStats) -> str:
    tokens = stats.tokens
    lines = [
        f"Session {stats.session_id}" if stats.session_id else f"All sessions ({stats.sessions})",
        f"Messages: {stats.total_messages} (user {stats.user_messages}, assistant {stats.assistant_messages}, "
        f"tool results {stats.tool_results}); tool calls {stats.tool_calls}",
        f"Tokens: input {tokens.input:,} · output {tokens.output:,} · cache read {tokens.cache_read:,} · "
        f"cache write {tokens.cache_write:,} · total {tokens.total:,}",
        f"Cost: ${stats.cost:.4f}",
    ]
    if stats.models:
        lines.append("By model:")
        for usage in stats.models:
            name = f"{usage.provider}/{usage.model}" if usage.model else "(summaries, tool results)"
            lines.append(f"  {name:40} {usage.records:6} records {usage.tokens.total:14,} tokens  ${usage.cost:.4f}")
    return "\n".join(lines)


@main.group("fts")
def fts_group() -> None:
    """The full-text search index."""


@fts_group.command("sync")
def fts_sync_command() -> None:
    """Index what was written since the last search (SQLite; PostgreSQL indexes on write)."""
    click.echo(f"indexed {fts.sync(current_store().engine)} new entries")


@fts_group.command("rebuild")
@click.option("--recompute", is_flag=True,
              help="Also recompute every entry's search text and analysis columns (and the usage totals).")
def fts_rebuild_command(recompute: bool) -> None:
    """Rebuild the search index from scratch."""
    engine = current_store().engine
    if recompute:  # rewrites every row's search text, and the index with it
        with write_transaction(engine) as conn:
            click.echo(f"recomputed and indexed {recompute_analysis(conn)} entries")
        return
    click.echo(f"indexed {fts.rebuild(engine)} entries")
