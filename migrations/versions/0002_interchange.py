"""Interchange bookkeeping: which file paths were imported into which session, up to which byte.

One ``imports`` row per source file path (absolute). ``source_bytes`` / ``source_sha256`` describe
the prefix of that file that is stored: a later ``sync`` compares the file with them to tell an
unchanged file (same size and hash), a file that grew by appends (the stored prefix hashes the
same: only the bytes after ``source_bytes`` are read) and a file that was rewritten, truncated or
edited (the prefix differs: a conflict, never merged). ``revision`` counts the imports of that
path that stored new bytes (1 for the first). Rows go with their session (``ON DELETE CASCADE``).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "imports",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("source_path", sa.Text(), nullable=False),
        sa.Column("session_pk", sa.Integer(), nullable=False),
        sa.Column("source_bytes", sa.BigInteger(), nullable=False),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("source_mtime_ms", sa.BigInteger(), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("imported_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("pk", name="pk_imports"),
        sa.ForeignKeyConstraint(
            ["session_pk"], ["sessions.pk"], name="fk_imports_session_pk_sessions", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("source_path", name="uq_imports_source_path"),
    )
    op.create_index("ix_imports_session_pk", "imports", ["session_pk"])


def downgrade() -> None:
    op.drop_table("imports")
