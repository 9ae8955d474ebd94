"""``pi-store``: the command line, one command per store operation (``pi-store --help``).

    pi-store [--db URL] import FILE... [--json]
    pi-store [--db URL] export SESSION [-o FILE] [--as-migrated]
    pi-store [--db URL] list [--cwd DIR] [--json]
    pi-store [--db URL] inspect SESSION [--leaf ID] [--all-leaves]
    pi-store [--db URL] delete SESSION... [--dry-run] [--ignore-missing] [--json]
    pi-store [--db URL] prune --older-than 30d [--keep-latest N] [--delete-sessions] [--apply] [--json]

``--db`` takes a SQLAlchemy URL (``sqlite:////abs/path.db``, ``postgresql://user@host/db``);
default ``$PI_STORE_DB``, else a SQLite file in the user's data directory. Each command module
registers its commands on :data:`store.cli.app.main` when imported.
"""

from store.cli import (  # noqa: F401  (they register their commands)
    analysis,
    claims,
    context,
    interchange,
    retention,
    sessions,
)
from store.cli.app import main

__all__ = ["main"]
