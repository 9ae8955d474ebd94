"""Session times read again: V8's fallback date formats.

``new Date(text)`` in Node reads far more than the ISO format: ``"Feb 1 2025"``,
``"Sat, 01 Feb 2025 09:00:00 GMT"``, ``"2025/02/01 09:00"``, ``"2/3"``... Until this revision the
store read those as no date, so a session holding such a timestamp (a hand-edited file; Pi never
writes one) kept the wrong ``created_ms`` / ``activity_ms`` / ``modified_ms`` and tool-call
``call_ms`` / ``duration_ms``. The upgrade recomputes them for the sessions with a string
timestamp in any other shape than Pi's (``store.db.session_times``): one scan of ``entries``, and
nothing more in a store of Pi-written files. The schema does not change; the downgrade leaves the
recomputed values, which are right under any revision.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

from store.db import session_times

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    session_times.refresh_odd_sessions(op.get_bind())


def downgrade() -> None:
    """Nothing to undo: only values changed, and they are what every revision should hold."""
