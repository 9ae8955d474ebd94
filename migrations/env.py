"""Alembic environment: runs on the connection handed over by ``store.db.engine`` or on the URL
given in the Alembic config (``alembic -x url=...`` or ``sqlalchemy.url``)."""

from __future__ import annotations

from alembic import context

from store.analysis import include_name
from store.db.engine import make_engine, migration_transaction
from store.db.schema import metadata

config = context.config
target_metadata = metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database: pass -x url=DATABASE_URL or set sqlalchemy.url")
    engine = make_engine(url)
    with migration_transaction(engine) as conn:
        _run(conn)
    engine.dispose()


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        include_name=include_name,  # autogenerate: leave the hand-written analysis objects alone
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) mode is not supported; run against a database")
run_migrations_online()
