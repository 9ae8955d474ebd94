"""Ownership of a session's history: a version for optimistic writes, an optional writer claim
with a fencing token, and where the store's history parted from the file it was imported from.

``row_version`` counts the write transactions that changed the session (appends, imports of new
lines, replacements, retention); a ``SessionManager`` remembers the value it last saw and writes
only while it is unchanged (compare-and-set inside the write transaction).

``claim_owner`` / ``claim_token`` / ``claim_expires_ms``: the writer that claimed the session, if
any. ``claim_token`` grows by one with every new claim and never goes back (the fencing token); a
writer holding an older token cannot write whatever the time. Expiry only lets another writer take
the claim over.

``diverged_seq``: the first row the store itself wrote (API appends, ``compact``) to a session that
was imported from a file; NULL while the stored history is exactly what the file held.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS = ("row_version", "claim_owner", "claim_token", "claim_expires_ms", "diverged_seq")


def upgrade() -> None:
    # plain ALTER TABLE on both engines (SQLite >= 3.35 drops columns itself): no table rebuild,
    # so the full-text triggers and the views over ``sessions`` stay as they are
    op.add_column("sessions", sa.Column("row_version", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("sessions", sa.Column("claim_owner", sa.Text(), nullable=True))
    op.add_column("sessions", sa.Column("claim_token", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("sessions", sa.Column("claim_expires_ms", sa.BigInteger(), nullable=True))
    op.add_column("sessions", sa.Column("diverged_seq", sa.Integer(), nullable=True))


def downgrade() -> None:
    for name in reversed(_COLUMNS):
        op.drop_column("sessions", name)
