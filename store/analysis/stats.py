"""Token and cost totals like Pi's ``/session`` (``AgentSession.getSessionStats``), per model too.

Pi counts over every entry of the file, abandoned branches and compacted history included:
messages by role, tool-call blocks of assistant messages, and the usage of assistant messages,
tool results that carry usage, ``usage`` entries and compaction / branch-summary usage (the rows
with ``has_usage = 1``). A session's totals are added in file order, as Pi adds them (so the
cost is the same double); the per-model rows are SQL sums; the all-sessions statistics are read
from the totals kept per session and day (``activity_days``, migration 0012: the same rows
added up as they were written), not from every row. Every
cost is reported rounded to 1e-10 (``store.money``), so it does not depend on the order of the sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, text

from store.db import queries
from store.db.engine import is_sqlite, read_transaction
from store.money import reported_cost


@dataclass(frozen=True, slots=True)
class Tokens:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        """Pi's total: input + output + cache read + cache write."""
        return self.input + self.output + self.cache_read + self.cache_write

    def to_json(self) -> dict:
        return {"input": self.input, "output": self.output, "cacheRead": self.cache_read,
                "cacheWrite": self.cache_write, "total": self.total}


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """Usage billed to one model (``provider``/``model`` None: compaction, branch-summary and
    tool-result usage, which name no model)."""

    provider: str | None
    model: str | None
    records: int
    tokens: Tokens
    cost: float

    def to_json(self) -> dict:
        return {"provider": self.provider, "model": self.model, "records": self.records,
                "tokens": self.tokens.to_json(), "cost": self.cost}


@dataclass(frozen=True, slots=True)
class SessionStats:
    """One session's statistics (``session_id`` None: all sessions of the store)."""

    session_id: str | None
    sessions: int
    user_messages: int
    assistant_messages: int
    tool_calls: int
    tool_results: int
    total_messages: int
    tokens: Tokens
    cost: float
    models: list[ModelUsage] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "sessionId": self.session_id, "sessions": self.sessions, "userMessages": self.user_messages,
            "assistantMessages": self.assistant_messages, "toolCalls": self.tool_calls,
            "toolResults": self.tool_results, "totalMessages": self.total_messages,
            "tokens": self.tokens.to_json(), "cost": self.cost, "models": [m.to_json() for m in self.models],
        }


def session_stats(engine: Engine, session_id: str | None = None) -> SessionStats:
    """Statistics of one session, or of all sessions when ``session_id`` is None."""
    with read_transaction(engine) as conn:
        session_pk = None if session_id is None else queries.stored_session(conn, session_id).pk
        return _stats(conn, session_id, session_pk)


def names_order(*names: str | None) -> tuple:
    """A sort key for text columns that both engines' rows share: NULL first, then code point
    order (SQLite's own; PostgreSQL's ``ORDER BY`` put NULL last and followed the database's
    collation, so ties of cost came out in another order)."""
    return tuple((name is not None, name or "") for name in names)


# all sessions: the same sums, from the totals kept per session and day (migration 0012)
_KEPT_COUNTS = """SELECT coalesce(sum(messages), 0) AS total, coalesce(sum(user_messages), 0) AS user_messages,
       coalesce(sum(assistant_messages), 0) AS assistant_messages, coalesce(sum(tool_results), 0) AS tool_results,
       coalesce(sum(tool_calls), 0) AS tool_calls
FROM activity_days"""
_KEPT_MODELS = """SELECT NULLIF(provider, '') AS provider, NULLIF(model, '') AS model, sum(calls) AS records,
       {add}(input) AS input, {add}(output) AS output, {add}(cache_read) AS cache_read,
       {add}(cache_write) AS cache_write, sum(cost) AS cost
FROM activity_days WHERE calls > 0
GROUP BY provider, model"""


def _stats(conn: Connection, session_id: str | None, session_pk: int | None) -> SessionStats:
    if session_pk is None:
        return _totals(session_id, queries.session_count(conn), conn.execute(text(_KEPT_COUNTS)).one(),
                       conn.execute(text(_KEPT_MODELS.format(add=queries.adding_counts(conn)))).all(), None)
    params = {"spk": session_pk}
    only = " AND session_pk = :spk" if session_pk is not None else ""
    calls = ("json_array_length(facts, '$.toolCalls')" if is_sqlite(conn)
             else "jsonb_array_length(facts -> 'toolCalls')")
    counts = conn.execute(text(f"""
        SELECT count(*) AS total,
               coalesce(sum(CASE WHEN role = 'user' THEN 1 ELSE 0 END), 0) AS user_messages,
               coalesce(sum(CASE WHEN role = 'assistant' THEN 1 ELSE 0 END), 0) AS assistant_messages,
               coalesce(sum(CASE WHEN role = 'toolResult' THEN 1 ELSE 0 END), 0) AS tool_results,
               coalesce(sum(CASE WHEN role = 'assistant' AND facts -> 'toolCalls' IS NOT NULL
                                 THEN {calls} ELSE 0 END), 0) AS tool_calls
        FROM entries WHERE kind = 'entry' AND type = 'message'{only}"""), params).one()
    add = queries.adding_counts(conn)
    models = conn.execute(text(f"""
        SELECT NULLIF(provider, '') AS provider, NULLIF(model, '') AS model, count(*) AS records,
               {add}(usage_input) AS input, {add}(usage_output) AS output, {add}(usage_cache_read) AS cache_read,
               {add}(usage_cache_write) AS cache_write, sum(usage_cost) AS cost
        FROM entries WHERE has_usage = 1{only}
        GROUP BY provider, model"""), params).all()
    sums = [0, 0, 0, 0, 0.0]  # in file order, like Pi
    for row in conn.execute(text(
        "SELECT usage_input, usage_output, usage_cache_read, usage_cache_write, usage_cost FROM entries "
        "WHERE session_pk = :spk AND has_usage = 1 ORDER BY seq"
    ), params):
        for index, value in enumerate(row):
            sums[index] += value
    return _totals(session_id, 1, counts, models, sums)


def _totals(session_id: str | None, sessions: int, counts, models: list, sums: list | None) -> SessionStats:
    """The statistics from the message counts, the per-model rows and the totals (``sums``:
    input, output, cache read, cache write, cost; None: the per-model rows added up)."""
    if sums is None:
        sums = [sum(m[i] for m in models) for i in range(3, 8)]
    return SessionStats(
        session_id=session_id, sessions=sessions,
        user_messages=int(counts.user_messages), assistant_messages=int(counts.assistant_messages),
        tool_calls=int(counts.tool_calls), tool_results=int(counts.tool_results), total_messages=int(counts.total),
        tokens=Tokens(*(int(v) for v in sums[:4])), cost=reported_cost(sums[4]),
        models=[ModelUsage(m.provider, m.model, int(m.records),
                           Tokens(int(m.input), int(m.output), int(m.cache_read), int(m.cache_write)),
                           reported_cost(m.cost))
                for m in sorted(models, key=lambda m: (-m.cost, *names_order(m.provider, m.model)))],
    )
