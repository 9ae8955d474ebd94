"""The file's stat when its bytes were read: a later sync trusts an unchanged stat.

``imports.source_stat`` holds ``device:inode:size:mtime_ns:ctime_ns`` of the file as it was when
an import read it, recorded only when the file had not changed for two seconds before (a write
in the same clock tick as the read would leave the times as they were). A later import or sync
that finds the same stat reports the file ``unchanged`` without reading it, as rsync's quick
check does; ``--checksum`` reads every file as before. NULL (every row after the upgrade): the
file is read and hashed, and the stat is recorded then. The downgrade drops the column.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("imports", sa.Column("source_stat", sa.Text(), nullable=True))  # plain ALTER TABLE on both


def downgrade() -> None:
    op.drop_column("imports", "source_stat")
