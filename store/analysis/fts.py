"""The full-text index over ``entries.search_text`` (created by migration 0003) and search queries.

SQLite: the FTS5 table ``entries_fts`` indexes the rows up to ``fts_watermark.indexed_pk``;
:func:`sync` indexes the rows written since, in one statement, and every reader of the index
(search, ``pi-store sql``) calls it first, so what it reads is current. PostgreSQL: a GIN index on
``pi_search_words(search_text)`` (the text's words, migration 0015) that PostgreSQL keeps current
itself; nothing to do here (but its planner needs the statistics ``ANALYZE`` gathers, as
autovacuum does, to read the index for rare words). Phrases are checked on the rows it finds with
``pi_search_vector(search_text)``, which has the words' positions.

Queries are written like web searches: words (all must match; ``AND`` between them is optional),
``"a phrase"``, ``word*`` (prefix), ``-word`` or ``NOT word`` (exclude), ``OR`` between
alternatives (AND binds tighter: ``a b OR c`` is ``(a AND b) OR c``), parentheses to group
(``(a OR b) c``, ``-(a OR b)``; expanded to alternatives of conjunctions). AND and NOT are
operators in upper case only (OR in any case). Words are runs of letters and digits, as both
indexes split text, so ``foo-bar`` searches the phrase ``foo bar``. :func:`parse_query` turns
the text into :class:`Query`, which compiles to an FTS5 ``MATCH`` string or PostgreSQL's
``tsquery`` texts with the same meaning. FTS5 is given each term as typed and splits it with the
tokenizer of its index: ``unicode61`` keeps some characters in its words that are not letters or
digits (a combining accent, as in decomposed ``café``, which macOS writes; private-use
characters), so words split here would not be its words.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from store.analysis.extract import KEEP_ONCE_MIN_CHARS
from store.db.engine import (
    behind_pooler,
    driver_connect,
    driver_error,
    is_sqlite,
    lock_timeout_ms,
    read_transaction,
    write_transaction,
)
from store.db.faults import CANNOT_WRITE, sqlite_fault
from store.errors import StoreError

_log = logging.getLogger(__name__)
_warned: weakref.WeakSet[Engine] = weakref.WeakSet()  # engines whose stale index was reported

WORD = re.compile(r"[^\W_]+")  # a word: a run of letters and digits
_TOKEN = re.compile(r'((?:-?\()*)(-?)"([^"]*)"?(\*?)(\)*)|(\S+)')  # [(]-"a phrase"*[)], or anything else
_LEADING_OPENS = re.compile(r"(?:-?\()*")  # "(" or "-(" (NOT a group), repeated
_GROUP_OPENS = re.compile(r"-?\(")


class BadQuery(StoreError):
    """A search text that selects nothing by construction (no words, or only exclusions)."""


@dataclass(frozen=True, slots=True)
class Term:
    """A word or phrase (its words, in order); ``prefix``: the last word is a prefix; ``text``: the
    term as typed (without its sign, quotes and star), for SQLite's tokenizer to split."""

    words: tuple[str, ...]
    text: str
    prefix: bool = False
    excluded: bool = False


@dataclass(frozen=True, slots=True)
class Query:
    """Alternatives (OR) of conjunctions (AND) of terms."""

    alternatives: tuple[tuple[Term, ...], ...]

    def fts5(self) -> str:
        """The FTS5 ``MATCH`` expression."""
        groups = []
        for terms in self.alternatives:
            positive = " AND ".join(_fts5_term(t) for t in terms if not t.excluded)
            negative = "".join(f" NOT {_fts5_term(t)}" for t in terms if t.excluded)
            groups.append(f"({positive}{negative})")
        return " OR ".join(groups)

    def tsquery(self) -> str:
        """The ``to_tsquery('simple', ...)`` text (words are letters and digits only: no quoting issues)."""
        return _balanced([_balanced([("!" if t.excluded else "") + _ts_term(t) for t in terms], "&")
                          for terms in self.alternatives], "|")

    def words_tsquery(self) -> str:
        """The ``tsquery`` text (its input syntax: no parser) that PostgreSQL's index of the rows'
        words (``pi_search_words``) answers: the words of each alternative's terms, all present;
        excluded words absent. Exact unless :meth:`has_phrase`: an excluded phrase is left out
        here, a phrase becomes its words (the rows found are then checked with :meth:`tsquery`)."""
        groups = []
        for terms in self.alternatives:
            parts = [f"!{_ts_term(t)}" for t in terms if t.excluded and len(t.words) == 1]
            parts[:0] = [word for t in terms if not t.excluded for word in _ts_words(t)]
            groups.append(_balanced(parts, "&"))
        return _balanced(groups, "|")

    def has_phrase(self) -> bool:
        """Whether a term has several words (a phrase: their order matters)."""
        return any(len(t.words) > 1 for terms in self.alternatives for t in terms)


def _balanced(parts: list[str], operator: str) -> str:
    """``parts`` joined by a ``tsquery`` operator as a balanced tree, parenthesised: PostgreSQL
    evaluates a query recursively, and a chain of 20,000 alternatives exceeded its stack depth."""
    while len(parts) > 1:
        parts = [f"({parts[i]} {operator} {parts[i + 1]})" if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return f"({parts[0] if parts else ''})"


# what SQLite cannot take inside a string: NUL (ends the string) and lone surrogates (no UTF-8);
# neither is part of a word of its index
_NOT_IN_FTS5 = re.compile("[\x00\ud800-\udfff]")


def _fts5_term(term: Term) -> str:
    """The term as an FTS5 string, which FTS5 splits into its words (``"`` doubled inside)."""
    typed = _NOT_IN_FTS5.sub(" ", term.text).replace('"', '""')
    return f'"{typed}"' + (" *" if term.prefix else "")


def _ts_words(term: Term) -> list[str]:
    words = [f"'{w}'" for w in term.words]
    if term.prefix:
        words[-1] += ":*"
    return words


def _ts_term(term: Term) -> str:
    return "(" + " <-> ".join(_ts_words(term)) + ")"


MAX_EXPANDED = 20_000  # terms a query's parentheses may expand to (in all its alternatives together)
MAX_NESTING = 100  # parentheses in parentheses
_OPEN, _CLOSE, _AND, _OR, _NOT = "(", ")", "AND", "OR", "NOT"
Conjunctions = list[tuple[Term, ...]]  # a query part in disjunctive normal form: OR of ANDs


def parse_query(query: str) -> Query:
    """Parse a web-search-style query (see the module docstring); raises :class:`BadQuery`."""
    tokens = _tokens(query)
    alternatives, _end = _alternatives(query, tokens, 0)  # the end: _tokens drops parentheses that close nothing
    if not alternatives:
        raise BadQuery(f"nothing to search for in {query!r}: give at least one word")
    for terms in alternatives:
        if all(t.excluded for t in terms):
            raise BadQuery(f"{query!r}: each alternative needs a word that is not excluded")
    return Query(tuple(alternatives))


def _tokens(query: str) -> list[Any]:
    """Terms, operators and parentheses. A parenthesis groups at the edges of a word (``(a``,
    ``b)``, ``-(``); one inside a word is part of it (``print(x)`` is the phrase ``print x``), and
    a closing one that closes nothing is left out."""
    tokens: list[Any] = []
    depth = 0
    for match in _TOKEN.finditer(query):
        opening, negated, phrase, star, closing, bare = match.groups()
        if bare is not None:
            opening = _LEADING_OPENS.match(bare).group()  # type: ignore[union-attr]  # it matches ""
            bare = bare[len(opening):]
        for group in _GROUP_OPENS.findall(opening):
            tokens += [_NOT, _OPEN] if group == "-(" else [_OPEN]
            depth += 1
            if depth > MAX_NESTING:
                raise BadQuery(f"{query[:40]!r}...: parentheses nested more than {MAX_NESTING} deep")
        closes = len(closing or "")
        if bare is not None:
            body = bare.rstrip(")")
            closes = len(bare) - len(body)
            own = min(closes, max(0, body.count("(") - body.count(")")))  # print(x): the word's own
            body += ")" * own
            closes -= own
            if body in (_AND, _NOT) or body.upper() == _OR:  # AND, NOT upper case only (OR in any case)
                tokens.append(body.upper())
                body = ""
            negated = "-" if body.startswith("-") and len(body) > 1 else ""
            body = body[1:] if negated else body
            star = "*" if body.endswith("*") else ""
            phrase = body[:-1] if star else body
        words = tuple(w.lower() for w in WORD.findall(phrase))
        if words:
            tokens.append(Term(words, phrase, prefix=bool(star), excluded=bool(negated)))
        closes = min(closes, depth)
        tokens += [_CLOSE] * closes
        depth -= closes
    return tokens


def _alternatives(query: str, tokens: list[Any], at: int) -> tuple[Conjunctions, int]:
    """``a OR b OR ...`` from ``tokens[at]`` to a closing parenthesis or the end; alternatives
    with no term (``a OR``, ``()``) are left out."""
    alternatives: Conjunctions = []
    while True:
        conjunctions, at = _conjunction(query, tokens, at)
        alternatives += [terms for terms in conjunctions if terms]
        if at < len(tokens) and tokens[at] == _OR:
            at += 1
            continue
        return alternatives, at


def _conjunction(query: str, tokens: list[Any], at: int) -> tuple[Conjunctions, int]:
    """Parts joined by AND (or nothing) up to OR, a closing parenthesis or the end."""
    result: Conjunctions = [()]
    while at < len(tokens) and tokens[at] not in (_OR, _CLOSE):
        if tokens[at] == _AND:
            at += 1
            continue
        part, at = _part(query, tokens, at)
        result = _product(query, result, part)
    return result, at


def _part(query: str, tokens: list[Any], at: int) -> tuple[Conjunctions, int]:
    """A term, ``NOT`` a part, or a parenthesised group (closed at the end if left open)."""
    token = tokens[at]
    if token == _NOT:
        if at + 1 == len(tokens) or tokens[at + 1] in (_AND, _OR, _NOT, _CLOSE):
            raise BadQuery(f"{query!r}: NOT must be followed by a word, a phrase or a group")
        part, at = _part(query, tokens, at + 1)
        result: Conjunctions = [()]
        for terms in part:  # NOT (a b OR c) = (NOT a OR NOT b) AND NOT c
            result = _product(query, result, [(_negated(term),) for term in terms])
        return result, at
    if token == _OPEN:
        group, at = _alternatives(query, tokens, at + 1)
        return group or [()], at + 1 if at < len(tokens) else at
    return [(token,)], at + 1


def _negated(term: Term) -> Term:
    return Term(term.words, term.text, term.prefix, not term.excluded)


def _product(query: str, left: Conjunctions, right: Conjunctions) -> Conjunctions:
    """``left AND right``, both in disjunctive normal form. The size of the result is bounded
    in terms, not alternatives: 8,192 alternatives of 113 terms each made a 9 MB query that
    PostgreSQL worked on for 19 s before refusing it."""
    terms = len(right) * sum(map(len, left)) + len(left) * sum(map(len, right))
    if terms > MAX_EXPANDED:
        raise BadQuery(f"{query[:200]!r}: its parentheses expand to more than {MAX_EXPANDED:,} terms")
    return [a + b for a in left for b in right]


# ------------------------------------------------------------------------------ index upkeep
_PENDING = text("SELECT (SELECT coalesce(max(pk), 0) FROM entries) - indexed_pk FROM fts_watermark")


def pending(conn: Connection) -> int:
    """How far the SQLite index lags behind ``entries`` (in row keys; 0 when current)."""
    if not is_sqlite(conn):
        return 0
    return max(conn.execute(_PENDING).scalar_one(), 0)


# Migration 0010 (SQLite): a row whose whole searchable text is one string of its line, read back
# by SQLite exactly, keeps it in ``line`` alone. Its ``search_text`` is empty and ``facts`` says
# where the text is (``textAt``, a JSON path) and how long it is (``textChars``); the view
# ``entries_search`` gives every row's text, and the FTS5 index reads that view. New rows are
# written so (``store.db.writes.insert_sql``, on the path ``extract.text_path`` proposes); the
# rows stored before, or recomputed by ``backfill``, are converted by :func:`keep_once`, which finds
# the path by the row's type (``_TEXT_PATH``).
# ``_TEXT_PATH``: where a stored row's text would be, by its type; SQLite then checks that the string
# there is the text, character for character, before it leaves it out of ``search_text``.
# (json_valid first, in a CASE: JSON.parse takes lines that SQLite's parser refuses, e.g. deeper
# nesting, and a CASE is evaluated in order where AND terms may not be.)
_TEXT_PATH = """CASE WHEN json_valid(line) THEN CASE
    WHEN type = 'message' THEN CASE json_type(line, '$.message.content')
        WHEN 'text' THEN '$.message.content' WHEN 'array' THEN '$.message.content[0].text' END
    WHEN type IN ('compaction', 'branch_summary') THEN '$.summary'
    WHEN type = 'label' THEN '$.label'
    WHEN type = 'session_info' THEN '$.name'
    WHEN type = 'custom_message' THEN '$.content'
END END"""
# the path of a row that may keep its text in line alone (NULL for the others), over its columns
_CANDIDATE_PATH = (f"CASE WHEN kind = 'entry' AND length(search_text) >= {KEEP_ONCE_MIN_CHARS} "
                  f"AND facts ->> 'textChars' IS NULL THEN {_TEXT_PATH} END")
# that path where the string there is the text (over the columns and ``path``)
_KEPT_AT = ("CASE WHEN path IS NOT NULL AND json_type(line, path) = 'text' "
           "AND json_extract(line, path) = search_text THEN path END")
_KEPT_FACTS = "json_set(facts, '$.textAt', kept_at, '$.textChars', length(search_text))"
_KEEP_ONCE = f"""UPDATE entries SET facts = {_KEPT_FACTS}, search_text = ''
FROM (SELECT key, {_KEPT_AT} AS kept_at
      FROM (SELECT pk AS key, line, search_text, {_CANDIDATE_PATH} AS path FROM entries WHERE pk > :after)
      WHERE path IS NOT NULL) AS found
WHERE entries.pk = found.key AND found.kept_at IS NOT NULL"""
# every row's searchable text, where migration 0010 keeps it (its view ``entries_search``): a
# ``textAt`` whose check failed at insert (SQLite read another string there) leaves the text in place
ROW_TEXT = (
    "CASE WHEN {r}.search_text <> '' OR {r}.facts ->> 'textAt' IS NULL THEN {r}.search_text "
    "ELSE json_extract({r}.line, {r}.facts ->> 'textAt') END"
)


def one_copy(conn: Connection) -> bool:
    """Whether the SQLite schema keeps long texts in ``line`` alone (migration 0010 or later)."""
    found = conn.execute(text("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = 'entries_search'"))
    return found.first() is not None


def keep_once(conn: Connection, after_pk: int = 0) -> int:
    """Leave out of ``search_text`` the long texts of the stored rows above ``after_pk`` that
    their line holds (migration 0010, SQLite, inside the caller's write transaction; rows written
    since the migration are written so, but ``backfill`` rewrites the columns). Run where the
    index does not hold those rows (the update trigger would re-index each one); returns how many
    rows changed."""
    return conn.execute(text(_KEEP_ONCE), {"after": after_pk}).rowcount


def catch_up(conn: Connection) -> int:
    """Index the rows written since the last catch-up (SQLite; inside the caller's write
    transaction); returns how many rows with text were added."""
    if not is_sqlite(conn):
        return 0
    watermark = conn.execute(text("SELECT indexed_pk FROM fts_watermark")).scalar_one()
    top = conn.execute(text("SELECT coalesce(max(pk), 0) FROM entries")).scalar_one()
    if top <= watermark:
        return 0
    # the texts where revision 0010 keeps them (a migration before it may run this code too)
    source = "entries_search" if one_copy(conn) else "entries"
    added = conn.execute(
        text(
            "INSERT INTO entries_fts (rowid, search_text) "
            f"SELECT pk, search_text FROM {source} WHERE pk > :w AND pk <= :top AND search_text <> ''"
        ),
        {"w": watermark, "top": top},
    ).rowcount
    conn.execute(text("UPDATE fts_watermark SET indexed_pk = :top"), {"top": top})
    return added


def clear(conn: Connection) -> None:
    """Empty the SQLite index (the next catch-up indexes everything)."""
    if is_sqlite(conn):
        conn.execute(text("INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')"))
        conn.execute(text("UPDATE fts_watermark SET indexed_pk = 0"))


def sync(engine: Engine) -> int:
    """Bring the index up to date (a short write transaction, only when rows are pending).

    Readers of the index call it first, and a reader must still answer where this write cannot
    be made (a full disk, a read-only database, a lock held past the lock timeout): the index
    stays behind, a warning says so (logged once per engine: ``pi-store`` prints it on stderr),
    and 0 is returned; the reader then reads what the index holds.
    """
    if not is_sqlite(engine):
        return 0
    with read_transaction(engine) as conn:
        behind = pending(conn)
    if not behind:
        return 0
    try:
        with write_transaction(engine) as conn:
            return catch_up(conn)
    except OperationalError as exc:
        if sqlite_fault(exc) not in CANNOT_WRITE | {"locked"}:
            raise
        if engine not in _warned:
            _warned.add(engine)
            _log.warning("the full-text index could not be brought up to date (%s): results may miss "
                         "up to %d of the newest entries", exc, behind)
        return 0


def rebuild(engine: Engine) -> int:
    """Rebuild the index from ``search_text``; returns the number of indexed rows.

    PostgreSQL builds the new GIN index beside the old one (``REINDEX CONCURRENTLY``): searches
    use the old one and writers go on meanwhile (a plain ``REINDEX`` locks both out until it
    ends). A bulk build is also what makes it small: an index grown row by row through the pending
    list is several times larger (BENCHMARKS.md). It waits for the transactions that were
    writing when it began, up to the lock timeout (``PI_STORE_LOCK_TIMEOUT``), as every writer
    does. An invalid copy left by a rebuild that was stopped (or timed out) is dropped first."""
    if is_sqlite(engine):
        with write_transaction(engine) as conn:
            clear(conn)
            return catch_up(conn)
    conn = driver_connect(engine)
    try:
        conn.autocommit = True
        for (name,) in conn.execute(_LEFT_BY_A_STOPPED_REBUILD).fetchall():
            _within_lock_timeout(engine, conn, f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
        _within_lock_timeout(engine, conn, "REINDEX INDEX CONCURRENTLY ix_entries_search_words")
        return conn.execute("SELECT count(*) FROM entries WHERE search_text <> ''").fetchone()[0]
    except engine.dialect.loaded_dbapi.Error as exc:
        raise driver_error(engine, exc) from exc
    finally:
        conn.close()


def _within_lock_timeout(engine: Engine, conn: Any, sql: str) -> None:
    """A ``CONCURRENTLY`` statement on the driver connection ``conn``, waiting for other
    transactions no longer than the lock timeout. Directly connected, the connection's
    ``lock_timeout`` does that. Behind a transaction pooler the connection carries no settings and
    the statement cannot run in a transaction (where ``SET LOCAL`` would hold): a watcher on
    another connection cancels it once it has waited for a lock that long (found by its text)."""
    limit_ms = lock_timeout_ms()
    if not behind_pooler(engine.url) or limit_ms == 0:
        conn.execute(sql)
        return
    statement = f"{sql} /* pi-store fts rebuild {secrets.token_hex(8)} */"
    done, cancelled = threading.Event(), threading.Event()

    def watch() -> None:
        waiting_since = None
        failed = engine.dialect.loaded_dbapi.Error  # the watcher's own failure only loses the timeout
        with contextlib.suppress(failed), contextlib.closing(driver_connect(engine)) as watcher:
            watcher.autocommit = True
            while not done.wait(0.1):
                row = watcher.execute("SELECT pid, wait_event_type FROM pg_stat_activity WHERE query = %s",
                                      (statement,)).fetchone()
                waiting_since = (waiting_since or time.monotonic()) if row is not None and row[1] == "Lock" else None
                if waiting_since is not None and (time.monotonic() - waiting_since) * 1000 >= limit_ms:
                    cancelled.set()  # that backend, only while it still runs this statement (a pooler's is shared)
                    watcher.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE pid = %s AND query = %s "
                                    "AND state = 'active'", (row[0], statement))
                    return

    watcher = threading.Thread(target=watch, name="fts-rebuild-lock-timeout", daemon=True)
    watcher.start()
    try:
        conn.execute(statement)
    except engine.dialect.loaded_dbapi.Error as exc:
        if cancelled.is_set():
            raise StoreError(f"database is locked: fts rebuild waited {limit_ms / 1000:g} s (PI_STORE_LOCK_TIMEOUT) "
                             "for transactions open on the entries and stopped (an unfinished copy of the index "
                             "may be left: the next rebuild drops it): run it again") from exc
        raise
    finally:
        done.set()
        watcher.join()


_LEFT_BY_A_STOPPED_REBUILD = r"""
SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
WHERE i.indrelid = 'entries'::regclass AND NOT i.indisvalid
AND (c.relname LIKE 'ix\_entries\_search\_words\_ccnew%' OR c.relname LIKE 'ix\_entries\_search\_words\_ccold%')"""
