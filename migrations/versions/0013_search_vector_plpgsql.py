"""PostgreSQL: ``pi_search_vector`` in PL/pgSQL, so that the GIN index costs an append microseconds.

Issues 11 and 12. Revision 0003's function is SQL with ``SET search_path`` (and priced high): the
``SET`` keeps the planner from inlining it, which search needs (priced as what it costs, the
planner reads the GIN index for rare words instead of filtering rows newest first: 6 ms instead of
18 s at a million entries). But a SQL function that is not inlined is parsed and planned again in
every statement that calls it, and the ``SET`` saves and restores the setting around each call:
~13 µs a row within one statement, and about a tenth of a millisecond of server time for the
index entry of each single append (20-25 % of the append's server time, measured with the index
dropped). PL/pgSQL keeps its compiled function and expression plans for the connection's life and
is never inlined either; with every name schema-qualified it needs no ``SET``. Same value for
every text (the body is the same expression), so the index built on the old function stays
valid: ``CREATE OR REPLACE`` keeps the function's identity, nothing is rebuilt.

Downgrade restores revision 0003's function. SQLite: nothing (its full-text index is FTS5).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

SEARCH_FUNCTION = r"""CREATE OR REPLACE FUNCTION pi_search_vector(body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT COST 5000
AS $$ BEGIN
    RETURN pg_catalog.to_tsvector('pg_catalog.simple'::pg_catalog.regconfig,
                                  pg_catalog.regexp_replace(body, '[^[:alnum:]]+', ' ', 'g'));
END $$"""
# revision 0003's (its PG_SEARCH_FUNCTION)
SQL_SEARCH_FUNCTION = r"""CREATE OR REPLACE FUNCTION pi_search_vector(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT COST 5000 SET search_path = pg_catalog
AS $$ SELECT to_tsvector('simple'::regconfig, regexp_replace(body, '[^[:alnum:]]+', ' ', 'g')) $$"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(SEARCH_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(SQL_SEARCH_FUNCTION)
