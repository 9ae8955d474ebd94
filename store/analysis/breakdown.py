"""Usage, cost, messages and tool calls grouped by UTC day, model, cwd or tool (``pi-store stats --by``).

The rows are those ``pi-store stats`` adds up (``store.analysis.stats``: every message and every
usage-bearing entry of the files, abandoned branches and compacted history included): the
``activity`` view (migration 0007), so that each grouping's rows add up to the ``stats`` totals.
Without a time window they are read already added up per session and day (``activity_days``,
migration 0012: a few rows per session and day instead of every message); ``since`` / ``until``
cut days apart, so a window groups the view's rows themselves. Either way:

* ``day``: the first ten characters of the entry's ISO ``timestamp`` (Pi writes UTC), oldest
  first; entries without a timestamp (or with an empty one) under ``None``, last;
* ``model``: ``provider/model`` billed for the row's usage (``model`` alone without a provider);
  messages without usage (user messages, most tool results) and compaction / branch-summary
  usage under ``None``; highest cost first;
* ``cwd``: the session's working directory (its header's ``cwd``); highest cost first;
* ``tool``: the tool calls of assistant messages by tool name, from ``tool_call_pairs`` (calls,
  answered calls, failed ones); a message's usage cannot be split among its calls, so the
  message and usage fields are ``None``; most calls first.

``since`` / ``until`` keep the rows whose timestamp is at or after / before the given instant,
compared as ISO text (the form Pi writes). Costs follow ``store.money``: each group's sum
rounded to 1e-10, the same number on both engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine, text

from store.analysis.stats import Tokens
from store.db import queries
from store.db.engine import is_sqlite, read_transaction
from store.money import reported_cost

BY = ("day", "model", "cwd", "tool")

_SUMS = """count(DISTINCT a.session_pk) AS sessions, sum(a.messages) AS messages,
           sum(a.user_messages) AS user_messages, sum(a.assistant_messages) AS assistant_messages,
           sum(a.tool_results) AS tool_results, sum(a.tool_calls) AS tool_calls, sum(a.tool_errors) AS tool_errors,
           {add}(a.input) AS input, {add}(a.output) AS output, {add}(a.cache_read) AS cache_read,
           {add}(a.cache_write) AS cache_write, sum(a.cost) AS cost"""
_KEYS = {
    "day": ("a.day", "a.day"),
    "cwd": ("a.cwd", "a.cwd"),
    # a provider without a model names nothing billable: it falls under None with the rest
    "model": (
        "CASE WHEN a.model IS NULL THEN NULL ELSE a.provider END AS provider, a.model",
        "CASE WHEN a.model IS NULL THEN NULL ELSE a.provider END, a.model",
    ),
}
# activity_days, with the view's columns: NULL where the view has NULL ('' in the key)
_KEPT = """(SELECT k.session_pk, NULLIF(k.day, '') AS day, s.cwd, NULLIF(k.provider, '') AS provider,
           NULLIF(k.model, '') AS model, k.messages, k.user_messages, k.assistant_messages, k.tool_results,
           k.tool_calls, k.tool_errors, k.input, k.output, k.cache_read, k.cache_write, k.cost
    FROM activity_days AS k JOIN sessions AS s ON s.pk = k.session_pk)"""
# tool calls by name; the call's row gives the timestamp the window is applied to
_TOOLS = """
SELECT p.name, count(DISTINCT p.session_pk) AS sessions, count(*) AS tool_calls,
       sum(CASE WHEN p.result_seq IS NULL THEN 0 ELSE 1 END) AS tool_results,
       sum(CASE WHEN p.is_error = 1 THEN 1 ELSE 0 END) AS tool_errors
FROM tool_call_pairs AS p
{join}WHERE 1 = 1{where}
GROUP BY p.name"""
_CALL_ROW = "JOIN entries AS a ON a.session_pk = p.session_pk AND a.seq = p.call_seq\n"


@dataclass(frozen=True, slots=True)
class Group:
    """One group's totals (``key``: the day, ``provider/model``, cwd or tool name; None where the
    rows have none). For ``tool``, ``tool_results`` counts the tool's answered calls, and the
    message and usage fields are None."""

    key: str | None
    sessions: int
    tool_calls: int
    tool_results: int
    tool_errors: int
    messages: int | None = None
    user_messages: int | None = None
    assistant_messages: int | None = None
    tokens: Tokens | None = None
    cost: float | None = None

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "sessions": self.sessions,
            "messages": self.messages,
            "userMessages": self.user_messages,
            "assistantMessages": self.assistant_messages,
            "toolResults": self.tool_results,
            "toolCalls": self.tool_calls,
            "toolErrors": self.tool_errors,
            "tokens": None if self.tokens is None else self.tokens.to_json(),
            "cost": self.cost,
        }


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The groups of one ``by``, for one session (``session_id``) or all, within ``since``/``until``."""

    by: str
    session_id: str | None
    since: str | None
    until: str | None
    rows: list[Group] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "by": self.by,
            "sessionId": self.session_id,
            "since": self.since,
            "until": self.until,
            "rows": [row.to_json() for row in self.rows],
        }


def _sortable(timestamp: str | None) -> str | None:
    """``timestamp`` as a bound that compares as text with the four-digit years Pi writes: an
    extended year (``+010000-...``, ``-000001-...``) sorts by its sign, so "~" (after every such
    timestamp) or "" (before) stands for it."""
    return {"+": "~", "-": ""}.get(timestamp[:1], timestamp) if timestamp else timestamp


def breakdown(
    engine: Engine, by: str, session_id: str | None = None, *, since: str | None = None, until: str | None = None
) -> Breakdown:
    """The totals of every ``by`` group (one of :data:`BY`) of one session, or of all sessions when
    ``session_id`` is None; ``since`` / ``until``: ISO timestamps (e.g. ``2026-01-31T00:00:00.000Z``)."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, not {by!r}")
    with read_transaction(engine) as conn:
        if not is_sqlite(conn):
            # an aggregate over every row is estimated past jit_above_cost, and compiling its plan
            # takes longer than running it (measured at 100k entries: 3.0 s of JIT, 0.76 s without)
            conn.execute(text("SET LOCAL jit = off"))
        params: dict[str, object] = {"since": _sortable(since), "until": _sortable(until)}
        where = ""
        if session_id is not None:
            params["spk"] = queries.stored_session(conn, session_id).pk
            where += " AND {t}.session_pk = :spk"
        if since is not None:
            where += " AND a.timestamp >= :since"
        if until is not None:
            where += " AND a.timestamp < :until"
        if by == "tool":
            join = _CALL_ROW if since is not None or until is not None else ""
            rows = conn.execute(text(_TOOLS.format(join=join, where=where.format(t="p"))), params).all()
            groups = [
                Group(r.name, int(r.sessions), int(r.tool_calls), int(r.tool_results), int(r.tool_errors)) for r in rows
            ]
            groups.sort(key=lambda g: (-g.tool_calls, g.key is None, g.key or ""))
        else:
            select, group = _KEYS[by]
            # the kept totals unless a window cuts days apart (a plain subquery: both engines
            # apply the session condition inside it)
            source = _KEPT if since is None and until is None else "activity"
            sums = _SUMS.format(add=queries.adding_counts(conn))
            rows = conn.execute(
                text(f"SELECT {select}, {sums} FROM {source} AS a WHERE 1 = 1{where.format(t='a')} GROUP BY {group}"),
                params,
            ).all()
            groups = [_group(_key(by, r), r) for r in rows]
            if by == "day":
                groups.sort(key=lambda g: (g.key is None, g.key or ""))
            else:
                groups.sort(key=lambda g: (-(g.cost or 0.0), g.key is None, g.key or ""))
    return Breakdown(by, session_id, since, until, groups)


def _key(by: str, row) -> str | None:
    if by != "model":
        return row[0]
    provider, model = row[0], row[1]
    return None if model is None else f"{provider}/{model}" if provider else model


def _group(key: str | None, r) -> Group:
    return Group(
        key,
        int(r.sessions),
        int(r.tool_calls),
        int(r.tool_results),
        int(r.tool_errors),
        messages=int(r.messages),
        user_messages=int(r.user_messages),
        assistant_messages=int(r.assistant_messages),
        tokens=Tokens(int(r.input), int(r.output), int(r.cache_read), int(r.cache_write)),
        cost=reported_cost(r.cost),
    )
