"""PostgreSQL: the large ``entries`` columns compressed with LZ4 instead of pglz.

Issue 11, item 5 (and every read of long rows). ``line``, ``raw``, ``search_text`` and ``facts``
of a session's long tool results and assistant messages go to TOAST, compressed; PostgreSQL's
default, pglz, is the slow one. Measured on the corpus (25 files, 14.2 MB, one fresh database
each, two rounds): import 1.38–1.44 → 1.23–1.28 s, exporting every session 0.130 → 0.118 s,
``sum(length(line))`` over the table 42–44 → 31–33 ms; the table's size the same (27.7–27.8 MB).

Only values written from now on are compressed so (``SET COMPRESSION`` changes the column's
setting, not its stored values: nothing is rewritten, the table is locked only for the change of
its definition); older values stay pglz and read as before. A server built without LZ4 keeps
pglz (the migration checks ``default_toast_compression``'s choices). SQL users notice nothing:
the values read the same. A dump of such a database (``pg_dump``) names the columns' LZ4: it
restores on a server built without LZ4 only when dumped with ``--no-toast-compression``. Downgrade
sets the columns back to the server's default (PostgreSQL 14 and later: older servers have no
``SET COMPRESSION``, and upgrade left them alone).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

COLUMNS = ("line", "raw", "search_text", "facts")
_LZ4 = "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"


def _compress(method: str) -> None:
    for column in COLUMNS:
        op.execute(f"ALTER TABLE entries ALTER COLUMN {column} SET COMPRESSION {method}")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql" and bind.execute(text(_LZ4)).scalar():
        _compress("lz4")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql" and bind.execute(text(_LZ4)).scalar():  # what upgrade changed
        _compress("DEFAULT")
