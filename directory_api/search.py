"""Search over businesses and employers: the text a term is looked for in, kept current on
every write, and the criteria that look for it.

- Folded: lower-cased, accents stripped (`fold`), the same for what is stored and for terms.
- Stored: `Listing.search_name` (the name) and `Listing.search_text` (name, branch,
  description and subcategory), refreshed before every insert and update, and when a
  subcategory is renamed.
- Looked for: every word of the term as a substring of `search_text` (`sql.holds_text`:
  LIKE '%word%' on PostgreSQL, `instr` on SQLite).
  PostgreSQL's trigram index (migrations 0002 and 0005) serves those directly; on SQLite an
  FTS5 trigram table (migrations 0003 and 0024) narrows first, asked for the words' least
  common trigrams only (`TrigramShares`). Hits rank by how the whole term meets the name.
"""

import random
import re
import threading
import time
import unicodedata
from collections import Counter
from typing import Any, NamedTuple

from flask import current_app
from sqlalchemy import ColumnElement, bindparam, case, column, select, text

from .models.listing import Listing
from .models.reference import Category
from .platform import reads
from .platform.errors import abort
from .platform.extensions import db
from .platform.sql import holds_text, starts_with_text, text_bound
from .schemas.fields import CONTROL, CONTROL_CHARACTERS, WHITESPACE

# SQLite's full-text table of listings, which migration 0003 makes by hand and no model
# maps: autogenerate leaves it and its shadow tables alone (create_app).
SQLITE_SEARCH_TABLE = "listings_fts"


def fold(text: str | None) -> str:
    """Lower-cased, accents stripped: "Café" and "CAFE" both become "cafe"."""
    decomposed = unicodedata.normalize("NFKD", text or "")
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def search_text(
    name: str, branch: str | None, description: str | None, subcategory: str | None
) -> str:
    """What a search term's words are looked for in (also for rows loaded outside the ORM)."""
    return " ".join(fold(part) for part in (name, branch, description, subcategory) if part)


def refresh_search_columns(_mapper, _connection, listing: Listing) -> None:
    listing.search_name = fold(listing.name)
    listing.search_text = search_text(
        listing.name,
        listing.branch,
        listing.description,
        listing.subcategory.name if listing.subcategory else None,
    )


# Registered by create_app (events.py): a listing's search columns, before it is written.
LISTENERS = (
    (Listing, "before_insert", refresh_search_columns, {"propagate": True}),
    (Listing, "before_update", refresh_search_columns, {"propagate": True}),
)


def refresh_search_of_subcategory(category: Category) -> None:
    """Listings search their subcategory's name too: keep them in step when it is renamed."""
    for listing in db.session.scalars(select(Listing).where(Listing.subcategory_id == category.id)):
        refresh_search_columns(None, None, listing)


# How many listings' texts tell how common each trigram is, how long a process trusts what
# they told, and above what share of texts a trigram narrows too little to ask the index.
SAMPLE_ROWS, SAMPLE_SECONDS, BROAD = 1000, 600.0, 0.25
SHARES = "search_trigram_shares"  # the app's TrigramShares, in app.extensions


class TrigramShares:
    """The share of listings' search texts each trigram occurs in, from SAMPLE_ROWS texts
    drawn at random, taken again every SAMPLE_SECONDS, per process.

    FTS5 reads a token's whole list of rows: a trigram in every text ("ery" of "every
    day" in 101,000 of 101,000) cost the index 4 ms of its 4.2 for "golden bakery", where
    its words' least common trigrams alone cost 0.5 ms (bench/INSTRUCTIONS.md). An
    estimate is enough: which trigrams are asked for changes the work, never the hits, as
    every word is still checked in the text itself."""

    def __init__(self) -> None:
        self.shares: dict[str, float] = {}
        self.taken_at = -SAMPLE_SECONDS
        self.lock = threading.Lock()

    def __call__(self) -> dict[str, float]:
        if time.monotonic() - self.taken_at >= SAMPLE_SECONDS and self.lock.acquire(False):
            try:  # one thread samples; the others go on with what was known
                self.shares = self.sample()
                self.taken_at = time.monotonic()
            finally:
                self.lock.release()
        return self.shares

    @staticmethod
    def sample() -> dict[str, float]:
        top = reads.scalar(TOP) or 0
        keys = random.sample(range(1, top + 1), min(top, SAMPLE_ROWS))
        texts = [row.search_text for row in reads.rows(SAMPLED, {"keys": keys})]
        counts = Counter(gram for found in texts for gram in set(trigrams(found or "")))
        return {gram: count / len(texts) for gram, count in counts.items()}


def trigrams(word: str) -> list[str]:
    """The word's trigrams as FTS5's trigram tokenizer cuts them, each once, in order."""
    return list(dict.fromkeys(word[start : start + 3] for start in range(len(word) - 2)))


def rarest_trigrams(words: list[str], shares: dict[str, float]) -> list[str | None]:
    """Each word's least common trigram, or None for a word checked in the text alone: one of
    under three characters, or one whose least common trigram is in more than BROAD of
    the texts (going through the index to most of a location's rows cost twice reading
    them in place: "every" at 100,000 listings, 600 against 320 ms)."""
    rarest: list[str | None] = []
    for grams in map(trigrams, words):
        gram = min(grams, key=lambda gram: shares.get(gram, 0.0), default=None)
        rarest.append(gram if gram is not None and shares.get(gram, 0.0) <= BROAD else None)
    return rarest


def fts_query(rarest: list[str | None]) -> str | None:
    """The FTS5 query of the trigrams asked for (`rarest_trigrams`): every text holding a
    word holds its trigrams, so the rows found include every hit; a word's other trigrams
    narrow little (they come together) and each costs a list of rows to read. None when
    no word is asked for."""
    asked = dict.fromkeys(gram for gram in rarest if gram is not None)
    return " AND ".join('"' + gram.replace('"', '""') + '"' for gram in asked) or None


_FTS = SQLITE_SEARCH_TABLE
TOP = text(f"SELECT max(fts_rowid) FROM {_FTS}_rows")  # noqa: S608 (our own names)
SAMPLED = text(f"SELECT search_text FROM {_FTS} WHERE rowid IN :keys").bindparams(  # noqa: S608
    bindparam("keys", expanding=True)
)
# The listings whose search text holds every trigram asked for (migration 0024's tables).
INDEXED = text(
    f"SELECT listing_id FROM {_FTS}_rows WHERE fts_rowid IN "  # noqa: S608 (our own names)
    f"(SELECT rowid FROM {_FTS} WHERE {_FTS} MATCH :trigrams)"
).columns(column("listing_id"))


def index_trigrams(words: list[str]) -> list[str | None]:
    """On SQLite, what to ask the FTS5 trigram index for, to narrow first (migrations 0003,
    0024): each word's trigram (`rarest_trigrams`). PostgreSQL's trigram index serves the
    LIKE filters directly."""
    shares = current_app.extensions.get(SHARES) or current_app.extensions.setdefault(
        SHARES, TrigramShares()
    )  # made once per app, not for every search
    return rarest_trigrams(words, shares())


MIN_TERM, MAX_TERM = 2, 100
# The rule for the OpenAPI document: 2 to 100 characters once surrounding spaces are
# trimmed, none of them a control character.
TERM_SCHEMA = {
    "minLength": MIN_TERM,
    "pattern": (
        f"^[{WHITESPACE}]*[^{WHITESPACE}{CONTROL}][^{CONTROL}]{{{MIN_TERM - 2},{MAX_TERM - 2}}}"
        f"[^{WHITESPACE}{CONTROL}][{WHITESPACE}]*$"
    ),
}


def checked_term(term: str) -> str:
    """The search term trimmed; 422 naming `term` unless it is 2 to 100 characters without a
    control character (databases disagree on those: SQLite's FTS fails on NUL)."""
    term = term.strip()
    problem = None
    if not MIN_TERM <= len(term) <= MAX_TERM:
        problem = f"Give {MIN_TERM} to {MAX_TERM} characters."
    elif CONTROL_CHARACTERS.search(term):
        problem = "Contains control characters."
    if problem:
        abort(422, "The query has invalid parameters.", errors={"term": [problem]})
    return term


PG_INDEXED = re.compile(r"[^\W_]{3}")  # pg_trgm's trigrams come from runs of alphanumerics


class Search(NamedTuple):
    """A term as the statements built once take it (`search_criteria`): their shape (how
    many words, whether the index narrows first) and the values they bind; and whether the
    index serves every word, so that the rows read are about the hits (`rows_read`)."""

    shape: tuple[int, bool]
    values: dict[str, str]
    narrowed: bool


def search_of(term: str) -> Search:
    folded = fold(term)
    words = folded.split()
    dialect = db.engine.dialect.name  # asked of the engine: the session stays unused
    values = {f"search_word_{n}": text_bound(word, dialect) for n, word in enumerate(words)}
    values |= {
        "search_term": folded,
        "search_start": text_bound(folded, dialect, start=True),
        "search_within": text_bound(folded, dialect),
    }
    trigrams = None
    if dialect == "sqlite":
        rarest = index_trigrams(words)
        served = None not in rarest
        trigrams = fts_query(rarest)
    else:  # pg_trgm serves a word with three letters or digits in a row ("x.s" it rechecks)
        served = all(PG_INDEXED.search(word) for word in words)
    if trigrams is not None:
        values["trigrams"] = trigrams
    return Search((len(words), trigrams is not None), values, served)


def rows_read(search: Search, hits: int, listed: int) -> int:
    """About how many listings a search read: its hits where the index narrowed by every
    word (each hit is read, to count and rank it), else every one `listed` at the
    location. A word the index leaves out (too short, without three letters or digits in
    a row for pg_trgm, or in most texts for SQLite's sample) is checked in place on every
    row the others found: "the zq" reads every "the" for no hit."""
    return hits if search.narrowed else listed


def search_criteria(
    columns: Any, shape: tuple[int, bool]
) -> tuple[list[ColumnElement[bool]], ColumnElement[int]]:
    """The criteria that find every word of a term (`search_of`) in the search text of
    `columns` (a listing table's), and the relevance to order the hits by: the name equal
    to the term first, then starting with it, then containing it, then the rest. Their
    values are bound: built once per shape, they serve every term of that shape."""
    words, indexed = shape
    criteria = [
        *([columns.id.in_(INDEXED)] if indexed else []),
        *(holds_text(columns.search_text, bindparam(f"search_word_{n}")) for n in range(words)),
    ]
    name = columns.search_name
    relevance = case(
        (name == bindparam("search_term"), 0),
        (starts_with_text(name, bindparam("search_start")), 1),
        (holds_text(name, bindparam("search_within")), 2),
        else_=3,
    )
    return criteria, relevance
