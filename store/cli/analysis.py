"""``pi-store sql``, ``search``, ``stats`` and ``fts`` (the analysis surface, ``docs/sql.md``)."""

from __future__ import annotations

import html
import re
import sys
from typing import TYPE_CHECKING

import click

from store.cli.app import MAX_LIMIT, current_store, emit, finite, main
from store.cli.output import (
    Column,
    format_options,
    plural,
    resolve,
    write_delimited,
    write_nl,
    write_rows,
)
from store.visible_text import one_line, visible

if TYPE_CHECKING:
    from store.analysis.search import SearchHit
    from store.analysis.stats import SessionStats

DEFAULT_TIMEOUT = 30.0  # as store.analysis.readonly.DEFAULT_TIMEOUT (tests/test_cli_output.py checks)

# message roles (store.loading.KNOWN_ROLES) and entry types (store.format.models.ENTRY_MODELS),
# spelled out here so that the option needs no import (tests/test_cli_output.py checks them)
ROLES = ("assistant", "bashExecution", "branch_summary", "compaction", "context_edit", "custom", "custom_message",
         "hookMessage", "label", "message", "model_change", "session_info", "system", "thinking_level_change",
         "toolResult", "usage", "user")


@main.command("sql")
@click.argument("query")
@format_options("Print a JSON list of row objects.")
@click.option("--timeout", type=click.FloatRange(min=0), callback=finite, default=DEFAULT_TIMEOUT, show_default=True,
              help="Stop the statement after SECONDS, until its last row is printed (0: no limit).")
def sql_command(query: str, fmt: str | None, timeout: float) -> None:
    """Run one read-only SQL statement (views: docs/sql.md) and print the rows as they come.

    Every format streams; the table (also the piped default) sizes its columns from the first
    1,000 rows and ends with a row count.
    """
    from store.analysis.readonly import cell_text, row_objects, stream_sql, write_csv, write_json, write_table

    if not query.strip():
        raise click.BadParameter("empty: give one SQL statement", param_hint="QUERY")
    with stream_sql(current_store().engine, query, timeout=timeout) as rows:
        repeated = sorted({name for name in rows.columns if rows.columns.count(name) > 1})
        if repeated and fmt in ("json", "nl", "tsv"):  # a row object keeps one value per name
            raise click.ClickException(f"the result names more than one column {', '.join(repeated)}: name them apart "
                                       "with AS for --json, --nl or --tsv (--csv and the table show them all)")
        if fmt == "nl":
            write_nl(row_objects(rows.columns, rows))
        elif fmt == "tsv":
            write_delimited([Column(c, c) for c in rows.columns],
                            ({c: cell_text(v) for c, v in zip(rows.columns, row, strict=True)} for row in rows), "\t")
        else:
            write = write_json if fmt == "json" else write_csv if fmt == "csv" else write_table
            write(rows.columns, rows, sys.stdout)


_EXCLUDED = "\0"  # marks a query word "-word" while click parses the options


class _SearchCommand(click.Command):
    """``search`` takes ``-word`` (an exclusion) as part of the query, not as short options
    (``-branch`` would be ``-b -r ... -h``); ``-h`` and ``--options`` stay options, and the value
    of an option that takes one (``--session -dash``, ``--limit -3``) stays that value."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        short = {opt for param in params for opt in (*param.opts, *param.secondary_opts)
                 if not opt.startswith("--")}  # -h: help; -x (one letter) is an exclusion too
        valued = {opt for param in params if isinstance(param, click.Option) and not param.is_flag
                  and not param.count for opt in param.opts}
        marked = [_EXCLUDED + arg if arg.startswith("-") and not arg.startswith("--") and arg not in short | {"-"}
                  and (i == 0 or args[i - 1] not in valued) else arg for i, arg in enumerate(args)]
        return super().parse_args(ctx, marked)


@main.command("search", cls=_SearchCommand)
@click.argument("query", nargs=-1, required=True)
@click.option("--session", help="Only this session.")
@click.option("--role", type=click.Choice(ROLES), help="Only this message role or entry type.")
@click.option("--path-only", is_flag=True, help="Only entries on their session's current path.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, MAX_LIMIT), help="Most hits to print.")
@format_options("Print a JSON list of hits (each snippet an HTML fragment: its text escaped, matches in "
                "<mark>...</mark>).")
def search_command(query: tuple[str, ...], session: str | None, role: str | None, path_only: bool, limit: int,
                   fmt: str | None) -> None:
    """Full-text search: words, "phrases", prefix*, -word, NOT, AND, OR, (groups). Newest hits first.

    \b
    pi-store search refactor parser       both words (AND is implied)
    pi-store search '"unit test"'         a phrase
    pi-store search 'pars*' -legacy       a prefix, without the word legacy
    pi-store search 'queue OR broker NOT kafka'
    pi-store search '(queue OR broker) -(kafka OR redis)'
    The same meaning on SQLite and PostgreSQL. Words are letters and digits; upper-case
    AND, OR, NOT are operators.
    """
    from store.analysis.fts import BadQuery, parse_query
    from store.analysis.search import search

    text = " ".join(word.removeprefix(_EXCLUDED) for word in query)
    try:
        parse_query(text)
    except BadQuery as exc:
        raise click.ClickException(f"bad search query: {exc}") from exc
    hits = search(current_store().engine, text, session=session, role=role, path_only=path_only, limit=limit)
    shown = resolve(fmt)
    if not hits and shown in ("table", "plain"):
        click.echo(f"no entries match {text!r}", err=True)
        return
    rows = [_hit_row(hit) for hit in hits]
    write_rows(shown, SEARCH_COLUMNS, rows, _hit_line, styles={"snippet": _marked})


def _hit_row(hit: SearchHit) -> dict:
    return hit.to_json()


def _where(provenance: dict) -> str:
    where = provenance["branch"] + (f", {provenance['compaction']} compaction" if provenance["compaction"] else "")
    return where + (f", {provenance['edited']}" if provenance["edited"] else "")


SEARCH_COLUMNS = (
    Column("entryId", "entry", fold=False), Column("sessionId", "session", fold=False),
    Column("seq", "seq", table=False),
    Column("role", "role", text=lambda v: v or ""), Column("type", "type", table=False),
    Column("timestamp", "time", fold=False), Column("provenance", "where", text=_where),
    Column("snippet", "snippet", text=lambda v: " ".join(_unmarked(v).split())),
)


def _unmarked(snippet: str) -> str:
    """A snippet's text (``search.highlight`` gives an HTML fragment: its text escaped)."""
    return html.unescape(snippet.replace("<mark>", "").replace("</mark>", ""))


def _marked(row: dict) -> object:
    """The snippet with its matches highlighted (rich text), for the terminal."""
    from rich.text import Text

    text = Text()
    for i, part in enumerate(re.split(r"</?mark>", " ".join(row["snippet"].split()))):
        text.append(visible(html.unescape(part)), style="bold yellow reverse" if i % 2 else None)
    return text


def _hit_line(row: dict) -> str:
    snippet = " ".join(_unmarked(row["snippet"]).split())
    return (f"{row['entryId']}  {row['sessionId']}  {row['role'] or row['type']}  {row['timestamp'] or '-'}  "
            f"[{_where(row['provenance'])}]  {snippet}")


BY = ("day", "model", "cwd", "tool")  # as store.analysis.breakdown.BY (tests/analysis/test_breakdown.py checks)


@main.command("stats")
@click.argument("session", required=False)
@click.option("--session", "session_option", metavar="SESSION", help="The same as the SESSION argument.")
@click.option("--by", type=click.Choice(BY),
              help="A row per UTC day, model, cwd or tool: usage, cost, messages, tool calls.")
@click.option("--since", help="With --by: only entries at or after this date (ISO 8601, e.g. 2026-01-31).")
@click.option("--until", help="With --by: only entries before this date.")
@format_options("Print one JSON document (totals, and a row per model under \"models\"; with --by: "
                "{by, sessionId, since, until, rows}).")
def stats_command(session: str | None, session_option: str | None, by: str | None, since: str | None,
                  until: str | None, fmt: str | None) -> None:
    """Messages, tool calls, tokens and cost of a session (all sessions without SESSION), per model.

    --nl, --csv and --tsv print the rows per model (provider, model, records, tokens, cost).
    With --by day|model|cwd|tool, one row per day (UTC), model, working directory or tool
    instead (docs/sql.md, "Statistics and listing"); every format prints those rows.
    """
    if session and session_option and session != session_option:
        raise click.UsageError("give the session once: as SESSION or as --session")
    if "" in (session, session_option):  # not "every session" by accident
        raise click.BadParameter("empty: name a session, or leave it out for every session", param_hint="SESSION")
    session = session or session_option
    if by is not None:
        _breakdown(session, by, since, until, fmt)
        return
    if since is not None or until is not None:
        raise click.UsageError("--since and --until go with --by")
    from store.analysis.stats import session_stats

    stats = session_stats(current_store().engine, session)
    shown = resolve(fmt)
    if shown == "json":
        emit(stats.to_json())
    elif shown in ("nl", "csv", "tsv"):
        write_rows(shown, MODEL_COLUMNS, [_model_row(m.to_json()) for m in stats.models], str)
    else:
        click.echo(visible(_stats_text(stats, by_model=shown == "plain")))
        if stats.models and shown == "table":
            write_rows("table", MODEL_COLUMNS, [_model_row(m.to_json()) for m in stats.models], str)


def _breakdown(session: str | None, by: str, since: str | None, until: str | None, fmt: str | None) -> None:
    from store.analysis.breakdown import breakdown

    result = breakdown(current_store().engine, by, session, since=_iso(since, "--since"), until=_iso(until, "--until"))
    shown = resolve(fmt)
    if shown == "json":
        emit(result.to_json())
        return
    if shown == "nl":  # the row objects of the JSON document
        write_nl(group.to_json() for group in result.rows)
        return
    rows = [_flat(group.to_json()) for group in result.rows]
    if shown == "plain":
        for row in rows:
            click.echo(one_line(_breakdown_line(row, tool=by == "tool")))
        return
    columns = (Column("key", by, text=lambda v: "-" if v is None else v), *BREAKDOWN_COLUMNS)
    if shown == "table" and by == "tool":  # a tool has no usage of its own: empty columns left out
        columns = tuple(c for c in columns if c.key not in _USAGE_KEYS)
    write_rows(shown, columns, rows, str)


def _iso(value: str | None, option: str) -> str | None:
    """A date or time as the ISO text Pi writes (``2026-01-31T00:00:00.000Z``), for comparing timestamps."""
    from store.format.jsdate import js_iso, parse_iso_date

    if value is None:
        return None
    ms = parse_iso_date(value)
    if ms is None:
        raise click.BadParameter(f"not a date: {value!r}", param_hint=option)
    return js_iso(ms)


def _flat(doc: dict) -> dict:
    """A breakdown row with its tokens as ``tokensInput`` ... ``tokensTotal`` (None for tools)."""
    tokens = doc.pop("tokens") or dict.fromkeys(("input", "output", "cacheRead", "cacheWrite", "total"))
    return {**doc, **{f"tokens{key[0].upper()}{key[1:]}": value for key, value in tokens.items()}}


def _count(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


BREAKDOWN_COLUMNS = (
    Column("sessions", "sessions", numeric=True, text=_count),
    Column("messages", "messages", numeric=True, text=_count),
    Column("userMessages", "user", numeric=True, text=_count, table=False),
    Column("assistantMessages", "assistant", numeric=True, text=_count, table=False),
    Column("toolResults", "results", numeric=True, text=_count, table=False),
    Column("toolCalls", "tool calls", numeric=True, text=_count),
    Column("toolErrors", "errors", numeric=True, text=_count),
    *(Column(f"tokens{k}", k.lower(), numeric=True, text=_count, table=k == "Total")
      for k in ("Input", "Output", "CacheRead", "CacheWrite", "Total")),
    Column("cost", "cost", numeric=True, text=lambda v: "" if v is None else f"${v:.4f}"),
)
_USAGE_KEYS = frozenset({"messages", "userMessages", "assistantMessages", "tokensInput", "tokensOutput",
                         "tokensCacheRead", "tokensCacheWrite", "tokensTotal", "cost"})


def _breakdown_line(row: dict, *, tool: bool) -> str:
    key = "-" if row["key"] is None else row["key"]
    if tool:
        return (f"{key}  {plural(row['toolCalls'], 'call')}  {plural(row['toolErrors'], 'error')}  "
                f"{plural(row['sessions'], 'session')}")
    return (f"{key}  {plural(row['messages'], 'message')}  {plural(row['toolCalls'], 'tool call')}  "
            f"{row['tokensTotal']:,} tokens  ${row['cost']:.4f}  {plural(row['sessions'], 'session')}")


def _model_row(doc: dict) -> dict:
    tokens = doc.pop("tokens")
    return {**doc, **{f"tokens{key[0].upper()}{key[1:]}": value for key, value in tokens.items()}}


MODEL_COLUMNS = (
    Column("provider", "provider", text=lambda v: v or "-"), Column("model", "model", text=lambda v: v or "(no model)"),
    Column("records", "records", numeric=True),
    *(Column(f"tokens{k}", k.lower(), numeric=True, text="{:,}".format, table=k == "Total")
      for k in ("Input", "Output", "CacheRead", "CacheWrite", "Total")),
    Column("cost", "cost", numeric=True, text="${:.4f}".format),
)


def _stats_text(stats: SessionStats, *, by_model: bool) -> str:
    tokens = stats.tokens
    lines = [
        f"Session {one_line(stats.session_id)}" if stats.session_id else f"All sessions ({stats.sessions})",
        f"Messages: {stats.total_messages} (user {stats.user_messages}, assistant {stats.assistant_messages}, "
        f"tool results {stats.tool_results}); {plural(stats.tool_calls, 'tool call')}",
        f"Tokens: input {tokens.input:,} · output {tokens.output:,} · cache read {tokens.cache_read:,} · "
        f"cache write {tokens.cache_write:,} · total {tokens.total:,}",
        f"Cost: ${stats.cost:.4f}",
    ]
    if stats.models and by_model:
        lines.append("By model:")
        for usage in stats.models:
            name = one_line(f"{usage.provider}/{usage.model}") if usage.model else "(summaries, tool results)"
            lines.append(f"  {name:40} {plural(usage.records, 'record'):>14} {usage.tokens.total:14,} tokens  "
                         f"${usage.cost:.4f}")
    return "\n".join(lines)


@main.group("fts")
def fts_group() -> None:
    """The full-text search index."""


@fts_group.command("sync")
def fts_sync_command() -> None:
    """Index what was written since the last search (SQLite; PostgreSQL indexes on write)."""
    from store.analysis import fts

    click.echo(f"indexed {plural(fts.sync(current_store().engine), 'new entry', 'new entries')}")


@fts_group.command("rebuild")
@click.option("--recompute", is_flag=True,
              help="Also recompute every entry's search text and analysis columns, and every total kept as rows are "
                   "written (tool-call pairs, activity per day, the current path's runs and turns).")
def fts_rebuild_command(recompute: bool) -> None:
    """Rebuild the search index from scratch."""
    from store.analysis import fts
    from store.analysis.backfill import recompute_analysis
    from store.db.engine import write_transaction

    engine = current_store().engine
    if recompute:  # rewrites every row's search text, and the index with it
        with write_transaction(engine) as conn:
            click.echo(f"recomputed and indexed {plural(recompute_analysis(conn), 'entry', 'entries')}")
        return
    click.echo(f"indexed {plural(fts.rebuild(engine), 'entry', 'entries')}")
