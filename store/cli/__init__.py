"""``pi-store``: the command line, one command per store operation (``pi-store --help``).

    pi-store [--db URL] import FILE... [--json]
    pi-store [--db URL] export SESSION [-o FILE] [--as-migrated]
    pi-store [--db URL] list [--cwd DIR] [--json]
    pi-store [--db URL] inspect SESSION [--leaf ID] [--all-leaves]

``--db`` takes a SQLAlchemy URL (``sqlite:////abs/path.db``, ``postgresql://user@host/db``);
default ``$PI_STORE_DB``, else a SQLite file in the user's data directory. Each command module
registers its commands on :data:`store.cli.app.main` when imported.
"""

from store.cli import analysis, claims, context, interchange, serve, sessions  # noqa: F401  (they register their commands)
from store.cli.app import main

__all__ = ["main"]
