"""PostgreSQL: the role ``pi_store_reader`` and the two functions ``pi-store sql`` runs through.

``pi_store_reader`` is a ``NOLOGIN`` role with no memberships and ``SELECT`` on the store's
tables and views only (and, through default privileges, on the ones later migrations create).
``pi_store_sql_open(query)`` opens the user's statement as the cursor ``pi_store_sql`` and
``pi_store_sql_fetch(n)`` returns its next ``n`` rows. Both are ``SECURITY DEFINER`` functions
owned by the reader, so the statement is planned, permission-checked and evaluated as the reader,
and inside a security-definer function PostgreSQL refuses ``set_config('role', ...)`` and
``set_config('session_authorization', ...)``: the statement cannot become the connecting user
again, also not through a nested query (``query_to_xml``). ``store.analysis.readonly`` calls them
in a ``READ ONLY`` transaction.

The role is shared by every store of the cluster (roles are global); its grants are per database.
The migration creates it only when the migrating user may (superuser, or ``CREATEROLE`` and able
to grant the role to itself). Otherwise it logs a warning and creates nothing: ``pi-store sql``
then refuses to run on that database until an administrator re-runs this revision
(``alembic downgrade 0004`` then ``upgrade head``) as such a user. Only the migrating user (and
superusers) may call the functions; grant ``EXECUTE`` on them to other users of the store.

Downgrade drops the functions and this database's grants, then the role itself unless another
database still grants it something (then it stays, for that database).

SQLite: nothing (``pi-store sql`` opens its own read-only connection there).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import logging

from alembic import op
from sqlalchemy import Connection, text

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ROLE = "pi_store_reader"
log = logging.getLogger("alembic.runtime.migration")

_FUNCTIONS = """
CREATE OR REPLACE FUNCTION pi_store_sql_open(query text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE cur refcursor := 'pi_store_sql';
BEGIN
    OPEN cur NO SCROLL FOR EXECUTE query;
END $$;
CREATE OR REPLACE FUNCTION pi_store_sql_fetch(n integer) RETURNS SETOF record
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    RETURN QUERY EXECUTE 'FETCH ' || n || ' FROM pi_store_sql';  -- no format(): the driver reads percent signs
END $$;
REVOKE ALL ON FUNCTION pi_store_sql_open(text), pi_store_sql_fetch(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pi_store_sql_open(text), pi_store_sql_fetch(integer) TO CURRENT_USER;
"""


def _quote(conn: Connection, name: str) -> str:
    return conn.execute(text("SELECT quote_ident(:n)"), {"n": name}).scalar_one()


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    may, superuser = conn.execute(text(
        "SELECT rolsuper OR rolcreaterole, rolsuper FROM pg_roles WHERE rolname = current_user")).one()
    if not may:
        log.warning("%s not created: the migrating user has neither SUPERUSER nor CREATEROLE; "
                    "pi-store sql will refuse to run on this database", ROLE)
        return
    schema = _quote(conn, conn.execute(text("SELECT current_schema()")).scalar_one())
    try:
        with conn.begin_nested():
            exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": ROLE}).first()
            if not exists:
                conn.execute(text(f"CREATE ROLE {ROLE} NOLOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE "
                                  "NOREPLICATION NOBYPASSRLS"))
            if not superuser:  # ALTER ... OWNER TO the reader needs membership in it
                conn.execute(text(f"GRANT {ROLE} TO CURRENT_USER"))
            conn.execute(text(f"GRANT USAGE ON SCHEMA {schema} TO {ROLE}"))
            conn.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {ROLE}"))
            conn.execute(text(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {ROLE}"))
            conn.exec_driver_sql(_FUNCTIONS)
            # a new owner needs CREATE on the schema, which the reader must not keep
            conn.execute(text(f"GRANT CREATE ON SCHEMA {schema} TO {ROLE}"))
            conn.execute(text(f"ALTER FUNCTION pi_store_sql_open(text) OWNER TO {ROLE}"))
            conn.execute(text(f"ALTER FUNCTION pi_store_sql_fetch(integer) OWNER TO {ROLE}"))
            conn.execute(text(f"REVOKE CREATE ON SCHEMA {schema} FROM {ROLE}"))
    except Exception as exc:  # e.g. the role exists and this user may not grant it to itself
        log.warning("%s not set up (%s); pi-store sql will refuse to run on this database",
                    ROLE, str(exc).splitlines()[0])


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    conn.execute(text("DROP FUNCTION IF EXISTS pi_store_sql_open(text), pi_store_sql_fetch(integer)"))
    member = conn.execute(text(
        "SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = :r"), {"r": ROLE}).scalar()
    if not member:
        return
    conn.execute(text(f"DROP OWNED BY {ROLE}"))  # this database's grants and default privileges
    try:
        with conn.begin_nested():
            conn.execute(text(f"DROP ROLE {ROLE}"))
    except Exception:  # another database still grants it something: it stays for that one
        log.info("%s kept: another database still uses it", ROLE)
