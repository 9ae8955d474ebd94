"""Usage over time: tokens and cost per day and model, and the model each session used most.

Read from the usage columns of the rows Pi's ``/session`` counts (``has_usage = 1``, see
``store.analysis.stats``), grouped by the UTC day of the entry's ISO ``timestamp`` (its first ten
characters; rows without one fall under ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, text

from store.analysis.stats import Tokens, names_order
from store.db import queries
from store.db.stored_text import db_text


@dataclass(frozen=True, slots=True)
class DayUsage:
    """Usage billed on one day to one model (``model`` None: rows that name no model)."""

    day: str | None
    provider: str | None
    model: str | None
    tokens: Tokens
    cost: float

    def to_json(self) -> dict:
        return {"day": self.day, "provider": self.provider, "model": self.model, "tokens": self.tokens.to_json(),
                "cost": self.cost}


def usage_by_day(conn: Connection, session_pk: int | None = None) -> list[DayUsage]:
    """Per day and model, oldest day first (one session's rows when ``session_pk`` is given)."""
    only = " AND session_pk = :spk" if session_pk is not None else ""
    add = queries.adding_counts(conn)
    rows = conn.execute(text(f"""
        SELECT substr(timestamp, 1, 10) AS day, NULLIF(provider, '') AS provider, NULLIF(model, '') AS model,
               {add}(usage_input) AS input, {add}(usage_output) AS output, {add}(usage_cache_read) AS cache_read,
               {add}(usage_cache_write) AS cache_write, sum(usage_cost) AS cost
        FROM entries WHERE has_usage = 1{only}
        GROUP BY substr(timestamp, 1, 10), provider, model"""), {"spk": session_pk}).all()
    rows.sort(key=lambda r: (*names_order(r.day), *names_order(r.provider, r.model)))
    return [DayUsage(r.day, r.provider, r.model,
                     Tokens(int(r.input), int(r.output), int(r.cache_read), int(r.cache_write)), float(r.cost))
            for r in rows]


def main_models(conn: Connection, session_ids: list[str]) -> dict[str, str]:
    """For each session id, the ``provider/model`` billed most often in it (ties: the later one in
    name order); sessions without billed usage are left out."""
    if not session_ids:
        return {}
    stmt = text("""
        SELECT s.session_id, e.provider, e.model, count(*) AS records
        FROM sessions AS s JOIN entries AS e ON e.session_pk = s.pk
        WHERE s.session_id IN :ids AND e.has_usage = 1 AND e.model <> ''
        GROUP BY s.session_id, e.provider, e.model""").bindparams(bindparam("ids", expanding=True))
    given = {db_text(session_id): session_id for session_id in session_ids}  # the column holds db_text's form
    out: dict[str, str] = {}
    rows = conn.execute(stmt, {"ids": list(given)}).all()
    for row in sorted(rows, key=lambda r: (r.records, *names_order(r.provider, r.model))):
        out[given[row.session_id]] = f"{row.provider}/{row.model}" if row.provider else row.model
    return out
