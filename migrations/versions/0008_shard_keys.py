"""Shard keys: every primary key and unique constraint of session data includes the session key.

A distributed PostgreSQL (Citus, docs/design.md "Distributing on Citus") places the rows of a
table by one column and can only enforce keys that include it. The session data is placed by the
session key (``sessions.pk``, ``session_pk`` in the other tables), so:

* ``entries``: PostgreSQL's primary key is ``(session_pk, pk)`` (was ``pk``), and a plain index
  ``ix_entries_pk`` on ``pk`` keeps the order search walks newest first (``ORDER BY pk DESC
  LIMIT n`` stops after n matches of a common word; without it every match is read and sorted:
  measured at 45k rows, a search for "the" took 738 ms instead of 5.5 ms). SQLite keeps
  ``pk`` as the ``INTEGER PRIMARY KEY``: there it is the rowid, the table's own b-tree key and the
  full-text index's ``content_rowid``, not a constraint a distribution has to respect (SQLite is
  never distributed); ``UNIQUE (session_pk, seq)`` is the row's logical key on both engines.
* ``imports``: keyed ``(session_pk, source_path)``, the surrogate ``pk`` and the global
  ``UNIQUE (source_path)`` go. An import reads the record of the session it found by the file's
  session id, so the lookup always had the session key; a path that later holds another session
  gets a row of its own (its ``revision`` counts the imports of that path into that session).
* ``sessions.session_id`` is no longer unique there (a plain index stays for the queries that
  filter by it): the new table ``session_ids`` holds each id once (primary key ``session_id``)
  with the session key it leads to, filled here from the stored sessions. It is the directory
  ``open(id)`` reads first, distributed on the id itself; ``ON DELETE CASCADE`` from ``sessions``.

SQLite cannot drop a table constraint: ``sessions`` and ``imports`` are rebuilt (renamed aside,
created anew, copied, the old one dropped) with foreign keys off (``store.db.engine.
migration_transaction`` switches them off around every migration and runs ``foreign_key_check``
before it commits) and ``legacy_alter_table`` on, so that neither the views over ``sessions`` nor
the foreign keys of ``entries`` / ``tool_call_pairs`` / ``imports`` are rewritten to follow the
renamed table, and dropping it cascades nowhere. ``sessions`` is
re-created from its stored ``CREATE TABLE`` text with only the unique constraint taken out (or put
back), so every column stays exactly as earlier revisions made it.

Downgrade: ``UNIQUE (source_path)`` returns, so of several ``imports`` rows of one path only the
most recent import's row is kept (the others describe sessions the path no longer holds).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_UNIQUE_ID = ", \n\tCONSTRAINT uq_sessions_session_id UNIQUE (session_id)"
_ASIDE = "_{table}_0008"
_IMPORT_FIELDS = "session_pk, source_path, source_bytes, source_sha256, source_mtime_ms, revision, imported_ms"
# one row per path for the downgrade's UNIQUE (source_path): the one its latest import wrote
_LATEST_PER_PATH = f"""SELECT {_IMPORT_FIELDS} FROM (
    SELECT {_IMPORT_FIELDS},
           row_number() OVER (PARTITION BY source_path ORDER BY imported_ms DESC, session_pk DESC) AS n
    FROM {{table}}) AS ranked
WHERE n = 1"""


def _import_columns() -> list[sa.Column]:
    return [
        sa.Column("session_pk", sa.Integer(), nullable=False),
        sa.Column("source_path", sa.Text(), nullable=False),
        sa.Column("source_bytes", sa.BigInteger(), nullable=False),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("source_mtime_ms", sa.BigInteger(), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("imported_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["session_pk"], ["sessions.pk"], name="fk_imports_session_pk_sessions",
                                ondelete="CASCADE"),
    ]


def _set_aside(conn: sa.Connection, table: str) -> list[str]:
    """SQLite: rename ``table`` aside (nothing that names it is rewritten) and drop its indexes;
    returns their ``CREATE INDEX`` statements, for the table made in its place."""
    indexes = conn.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
        (table,)).all()
    conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {_ASIDE.format(table=table)}")
    for name, _sql in indexes:
        conn.exec_driver_sql(f"DROP INDEX {name}")
    return [sql for _name, sql in indexes]


def _rebuild_sqlite_sessions(conn: sa.Connection, *, unique_id: bool) -> None:
    """SQLite: ``sessions`` again, with or without ``UNIQUE (session_id)``, its rows and indexes."""
    stored = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sessions'")
    create = stored.scalar_one()
    if unique_id:
        body, closing = create.rsplit("\n)", 1)
        changed = f"{body}{_UNIQUE_ID}\n){closing}"
    else:
        changed = create.replace(_UNIQUE_ID, "")
    if (changed == create) or (_UNIQUE_ID in changed) != unique_id:
        raise RuntimeError(f"sessions is not the table this revision expects: {create}")
    indexes = _set_aside(conn, "sessions")
    conn.exec_driver_sql(changed)
    conn.exec_driver_sql(f"INSERT INTO sessions SELECT * FROM {_ASIDE.format(table='sessions')}")
    for sql in indexes:
        conn.exec_driver_sql(sql)
    conn.exec_driver_sql(f"DROP TABLE {_ASIDE.format(table='sessions')}")


def _with_legacy_rename(conn: sa.Connection, steps: Callable[[], None]) -> None:
    """SQLite: ``steps`` with renames that rewrite nothing else, which needs foreign keys off
    (``store.db.engine.migration_transaction``): with them on, SQLite renames the children's
    references too, and dropping the old table would delete its children's rows."""
    if conn.exec_driver_sql("PRAGMA foreign_keys").scalar():
        raise RuntimeError("revision 0008 rebuilds tables on SQLite: run it with foreign keys off "
                           "(store.db.engine.migration_transaction; Alembic's command line does)")
    conn.exec_driver_sql("PRAGMA legacy_alter_table = ON")
    try:
        steps()
    finally:
        conn.exec_driver_sql("PRAGMA legacy_alter_table = OFF")


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":

        def steps() -> None:
            _rebuild_sqlite_sessions(conn, unique_id=False)
            _set_aside(conn, "imports")
            op.create_table("imports", *_import_columns(),
                            sa.PrimaryKeyConstraint("session_pk", "source_path", name="pk_imports"))
            op.execute(f"INSERT INTO imports ({_IMPORT_FIELDS}) SELECT {_IMPORT_FIELDS} FROM _imports_0008")
            op.execute("DROP TABLE _imports_0008")

        _with_legacy_rename(conn, steps)
    else:
        op.execute("ALTER TABLE entries DROP CONSTRAINT pk_entries, "
                   "ADD CONSTRAINT pk_entries PRIMARY KEY (session_pk, pk)")
        op.execute("CREATE INDEX ix_entries_pk ON entries (pk)")  # (module docstring)
        op.execute("ALTER TABLE sessions DROP CONSTRAINT uq_sessions_session_id")
        op.drop_index("ix_imports_session_pk", table_name="imports")
        op.execute("ALTER TABLE imports DROP CONSTRAINT uq_imports_source_path, DROP COLUMN pk, "
                   "ADD CONSTRAINT pk_imports PRIMARY KEY (session_pk, source_path)")
    op.create_index("ix_sessions_session_id", "sessions", ["session_id"])
    op.create_table(
        "session_ids",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("session_pk", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_session_ids"),
        sa.ForeignKeyConstraint(["session_pk"], ["sessions.pk"], name="fk_session_ids_session_pk_sessions",
                                ondelete="CASCADE"),
        sqlite_with_rowid=False,
    )
    op.execute("INSERT INTO session_ids (session_id, session_pk) SELECT session_id, pk FROM sessions")
    op.create_index("ix_session_ids_session_pk", "session_ids", ["session_pk"])


def downgrade() -> None:
    conn = op.get_bind()
    op.drop_table("session_ids")
    op.drop_index("ix_sessions_session_id", table_name="sessions")
    if conn.dialect.name == "sqlite":

        def steps() -> None:
            _rebuild_sqlite_sessions(conn, unique_id=True)
            _set_aside(conn, "imports")
            op.create_table("imports", sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
                            *_import_columns(), sa.UniqueConstraint("source_path", name="uq_imports_source_path"))
            op.execute(f"INSERT INTO imports ({_IMPORT_FIELDS}) {_LATEST_PER_PATH.format(table='_imports_0008')}")
            op.execute("DROP TABLE _imports_0008")

        _with_legacy_rename(conn, steps)
    else:
        op.execute(f"DELETE FROM imports WHERE (session_pk, source_path) NOT IN "
                   f"(SELECT session_pk, source_path FROM ({_LATEST_PER_PATH.format(table='imports')}) AS kept)")
        op.execute("ALTER TABLE imports DROP CONSTRAINT pk_imports, ADD COLUMN pk SERIAL, ADD CONSTRAINT pk_imports "
                   "PRIMARY KEY (pk), ADD CONSTRAINT uq_imports_source_path UNIQUE (source_path)")
        op.execute("ALTER TABLE sessions ADD CONSTRAINT uq_sessions_session_id UNIQUE (session_id)")
        op.execute("DROP INDEX ix_entries_pk")
        op.execute("ALTER TABLE entries DROP CONSTRAINT pk_entries, ADD CONSTRAINT pk_entries PRIMARY KEY (pk)")
    op.create_index("ix_imports_session_pk", "imports", ["session_pk"])
