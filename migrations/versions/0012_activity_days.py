"""``activity_days``: the ``activity`` view added up per session, day, provider and model.

Issue 11, item 6. ``pi-store stats --by day|model|cwd`` and Datasette's canned ``usage_by_day`` /
``cost_by_model`` group the ``activity`` view (migration 0007) over the whole store: every
message row and, per assistant message, its tool calls — 1.2 to 3.3 seconds at a million entries,
past Datasette's one-second limit. This revision keeps those sums as rows are written
(``store.analysis.activity_days``; filled here from the stored rows and pairs): message counts
by role, tool calls and failed ones, and the usage that revision 0011's ``usage_days`` table kept.
That table becomes a view of the new one (its keys with usage rows, the same columns and rows),
so queries written against it keep working; its rows move over, nothing is recomputed for them.

Downgrade makes ``usage_days`` a table again from the view's rows and drops ``activity_days``.

PostgreSQL: revision 0005's default privileges give ``pi_store_reader`` SELECT on the new table
and view.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.analysis import activity_days

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_USAGE = "session_pk, day, provider, model, calls, input, output, cache_read, cache_write, cost"
USAGE_DAYS = f"CREATE VIEW usage_days AS SELECT {_USAGE} FROM activity_days WHERE calls > 0"


def _day_table(name: str, counts: tuple[str, ...]) -> None:
    """A table of totals per (session_pk, day, provider, model): ``counts`` (BIGINT), then the
    four token sums (``numeric`` on PostgreSQL) and the cost."""
    tokens = sa.BigInteger().with_variant(sa.Numeric(), "postgresql")
    op.create_table(
        name,
        sa.Column("session_pk", sa.Integer, sa.ForeignKey("sessions.pk", ondelete="CASCADE",
                                                          name=f"fk_{name}_session_pk_sessions")),
        sa.Column("day", sa.Text),
        sa.Column("provider", sa.Text),
        sa.Column("model", sa.Text),
        *(sa.Column(count, sa.BigInteger, nullable=False) for count in counts),
        *(sa.Column(total, tokens, nullable=False) for total in ("input", "output", "cache_read", "cache_write")),
        sa.Column("cost", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("session_pk", "day", "provider", "model", name=f"pk_{name}"),
        sqlite_with_rowid=False,
    )


def upgrade() -> None:
    _day_table("activity_days", activity_days.TOTALS[:7])
    activity_days.rebuild(op.get_bind())
    op.drop_table("usage_days")
    op.execute(USAGE_DAYS)


def downgrade() -> None:
    op.execute("DROP VIEW usage_days")
    _day_table("usage_days", ("calls",))
    op.execute(f"INSERT INTO usage_days ({_USAGE}) SELECT {_USAGE} FROM activity_days WHERE calls > 0")
    op.drop_table("activity_days")
