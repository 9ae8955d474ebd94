"""``ix_entries_messages_without_role``: the few message rows that have no role.

Pi reads the thinking level and the model off the *whole* root→leaf path (every message's
``message.role`` on the way), so a message entry whose ``message`` is null or missing makes Pi's
context, projection, estimates and compaction preparation fail with a ``TypeError`` even when a
later compaction summarised it away. The store reads only the window a compaction keeps
(``store.context_window``); to fail as Pi does it must find such a row before the window without
reading the rows in between. This partial index holds the message rows whose ``role`` column is
NULL (``message`` null, missing, not an object, or an object without a role): none in a store of
files Pi wrote, a handful in hand-edited or damaged ones. Building it reads ``entries`` once;
writes pay only the predicate check. Downgrade drops it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

WITHOUT_ROLE = "type = 'message' AND role IS NULL"


def upgrade() -> None:
    op.create_index("ix_entries_messages_without_role", "entries", ["session_pk", "seq"],
                    sqlite_where=sa.text(WITHOUT_ROLE), postgresql_where=sa.text(WITHOUT_ROLE))


def downgrade() -> None:
    op.drop_index("ix_entries_messages_without_role", "entries")
