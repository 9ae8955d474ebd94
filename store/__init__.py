"""pi-session-store: Pi coding-agent session trees in SQL, with lossless JSONL interchange.

The documented entry point::

    from store import SessionStore, SessionManager, SessionChanged

:class:`SessionStore` (``SessionStore.connect(url)``) holds many sessions; :class:`SessionManager`
is Pi's API over one of them. The error types of :mod:`store.errors` are re-exported. The names
are resolved on first use, so ``import store`` alone loads neither SQLAlchemy nor Alembic (the
``pi-store`` command line relies on that to start quickly).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.errors import (
        EntryNotFound,
        ImportFailed,
        InvalidEntry,
        InvalidReplacement,
        InvalidSessionId,
        NotEditable,
        NotOnActiveBranch,
        NotPiSession,
        SessionChanged,
        SessionClaimed,
        SessionExists,
        SessionNotFound,
        StoreError,
    )
    from store.manager import SessionManager
    from store.session_store import SessionStore

__all__ = [
    "EntryNotFound", "ImportFailed", "InvalidEntry", "InvalidReplacement", "InvalidSessionId", "NotEditable",
    "NotOnActiveBranch", "NotPiSession", "SessionChanged", "SessionClaimed", "SessionExists", "SessionManager",
    "SessionNotFound", "SessionStore", "StoreError",
]
_HOMES = {name: "store.errors" for name in __all__} | {"SessionStore": "store.session_store",
                                                       "SessionManager": "store.manager"}


def __getattr__(name: str) -> Any:
    """Import ``SessionStore``, ``SessionManager`` and the error types when first asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
