"""The one number rule for money: a cost is reported rounded to 10 decimal places (1e-10 dollars).

A session's cost is a sum of doubles (each usage record's ``cost.total``), and a sum of doubles
depends on its order: Pi's ``/session`` adds in file order, SQLite's ``sum()`` compensates its
rounding errors, PostgreSQL adds in scan order. Their results differ in the last digits
(49.70098325 against 49.700983250000014), far below a cent but enough to make two surfaces
disagree. Every surface therefore reports ``round(sum, 10)``: ``list``, ``find_by_id``, ``stats``
(per session, per model, all sessions) and their JSON, on either engine, and SQL over the views
gets the same number with ``round(CAST(sum(cost) AS NUMERIC), 10)`` (docs/sql.md). Prices are
quoted per million tokens with a few decimals, so a real cost has at most ~10 significant decimal
places and the rounding removes only the summation noise; it is Pi's number wherever Pi's has no
noise.
Token counts are integers and are summed exactly everywhere: no rule is needed for them.
"""

from __future__ import annotations

COST_DIGITS = 10


def reported_cost(total: float) -> float:
    """``total`` (a sum of costs, in any order) as every surface reports it (never ``-0.0``)."""
    return round(float(total), COST_DIGITS) + 0.0
