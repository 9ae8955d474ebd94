"""``pi-store``: the command line, one command per store operation (``pi-store --help``).

    pi-store [--db URL|FILE] import FILE... [--json]
    pi-store [--db URL|FILE] export SESSION [-o FILE] [--as-migrated]
    pi-store [--db URL|FILE] list [--cwd DIR] [--json | --nl | --csv | --tsv]
    pi-store [--db URL|FILE] inspect SESSION [--leaf ID] [--all-leaves]
    pi-store [--db URL|FILE] tree SESSION [--full] [--json]
    pi-store [--db URL|FILE] delete SESSION... [--dry-run] [--ignore-missing] [--json]
    pi-store [--db URL|FILE] prune --older-than 30d [--keep-latest N] [--delete-sessions] [--apply] [--json]
    pi-store [--db URL|FILE] path [--json]

``--db`` takes a SQLAlchemy URL (``sqlite:////abs/path.db``, ``postgresql://user@host/db``) or a
SQLite file path; default ``$PI_STORE_DB``, else a SQLite file in the user's data directory. The
command modules register their commands on :data:`store.cli.app.main` when imported, which
happens when one of their commands runs (``store.cli.app.COMMANDS``).
"""

from store.cli.app import main

__all__ = ["main"]
