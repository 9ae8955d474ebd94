"""Baseline: sessions and entries (one row per physical JSONL line).

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("cwd", sa.Text(), nullable=False),
        sa.Column("parent_session", sa.Text(), nullable=True),
        sa.Column("created", sa.Text(), nullable=True),
        sa.Column("created_ms", sa.BigInteger(), nullable=True),
        sa.Column("activity_ms", sa.BigInteger(), nullable=True),
        sa.Column("modified_ms", sa.BigInteger(), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("first_message", sa.Text(), nullable=True),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("header_seq", sa.Integer(), nullable=True),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("leaf_seq", sa.Integer(), nullable=True),
        sa.Column("pi_valid", sa.Boolean(), nullable=False),
        sa.Column("pi_listable", sa.Boolean(), nullable=False),
        sa.Column("has_conversation", sa.Boolean(), nullable=False),
        sa.Column("migrated_from", sa.Text(), nullable=True),
        sa.Column("source_path", sa.Text(), nullable=True),
        sa.Column("source_sha256", sa.String(64), nullable=True),
        sa.Column("source_bytes", sa.BigInteger(), nullable=True),
        sa.Column("source_mtime_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("pk", name="pk_sessions"),
        sa.UniqueConstraint("session_id", name="uq_sessions_session_id"),
    )
    op.create_index("ix_sessions_cwd_modified_ms", "sessions", ["cwd", "modified_ms"])
    op.create_index("ix_sessions_modified_ms", "sessions", ["modified_ms"])

    op.create_table(
        "entries",
        sa.Column("pk", RowId, primary_key=True, autoincrement=True),
        sa.Column("session_pk", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(12), nullable=False),
        sa.Column("entry_id", sa.Text(), nullable=True),
        sa.Column("parent_id", sa.Text(), nullable=True),
        sa.Column("type", sa.Text(), nullable=True),
        sa.Column("role", sa.Text(), nullable=True),
        sa.Column("target_id", sa.Text(), nullable=True),
        sa.Column("timestamp", sa.Text(), nullable=True),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("raw", sa.LargeBinary(), nullable=True),
        sa.Column("eol", sa.String(2), nullable=False),
        sa.Column("parent_seq", sa.Integer(), nullable=True),
        sa.Column("depth", sa.Integer(), nullable=True),
        sa.Column("run_start", sa.Integer(), nullable=True),
        sa.Column("compaction_seq", sa.Integer(), nullable=True),
        sa.Column("thinking_seq", sa.Integer(), nullable=True),
        sa.Column("model_seq", sa.Integer(), nullable=True),
        sa.Column("superseded", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("pk", name="pk_entries"),
        sa.ForeignKeyConstraint(
            ["session_pk"], ["sessions.pk"], name="fk_entries_session_pk_sessions", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("session_pk", "seq", name="uq_entries_session_pk_seq"),
    )
    op.create_index("ix_entries_session_pk_entry_id_seq", "entries", ["session_pk", "entry_id", "seq"])
    op.create_index("ix_entries_session_pk_parent_id", "entries", ["session_pk", "parent_id"])
    # partial indexes: message rows (most of them) stay out, so an append writes fewer pages
    op.create_index(
        "ix_entries_session_pk_type_seq", "entries", ["session_pk", "type", "seq"],
        sqlite_where=sa.text("type <> 'message'"), postgresql_where=sa.text("type <> 'message'"),
    )
    op.create_index(
        "ix_entries_session_pk_target_id", "entries", ["session_pk", "target_id"],
        sqlite_where=sa.text("target_id IS NOT NULL"), postgresql_where=sa.text("target_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("entries")
    op.drop_table("sessions")
