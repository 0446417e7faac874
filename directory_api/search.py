"""Search over businesses and employers: the text a term is looked for in, kept current on
every write, and the criteria that look for it.

- Folded: lower-cased, accents stripped (`fold`), the same for what is stored and for terms.
- Stored: `Listing.search_name` (the name) and `Listing.search_text` (name, branch,
  description and subcategory), refreshed before every insert and update, and when a
  subcategory is renamed.
- Looked for: every word of the term as a substring of `search_text` (LIKE '%word%').
  PostgreSQL's trigram index (migrations 0002 and 0005) serves those directly; on SQLite an
  FTS5 trigram table (migration 0003) narrows first. Hits rank by how the whole term meets
  the name.
"""

import unicodedata
from typing import Any

from sqlalchemy import ColumnElement, case, literal_column, select, text

from .models.listing import Listing
from .models.reference import Category
from .platform.errors import abort
from .platform.extensions import db
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


def escape_like(text: str) -> str:
    """`%`, `_` and `\\` are literal characters in a search term."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def sqlite_search_index(words: list[str]) -> list[Any]:
    """On SQLite, narrow through the FTS5 trigram index (migration 0003) first.

    Trigrams need three characters; shorter words are left to the LIKE filters alone.
    PostgreSQL needs nothing here: its trigram index serves the LIKE filters directly.
    """
    if db.session.get_bind().dialect.name != "sqlite":
        return []
    phrases = ['"' + word.replace('"', '""') + '"' for word in words if len(word) >= 3]
    if not phrases:
        return []
    matches = (
        select(literal_column("listing_id"))
        .select_from(text(SQLITE_SEARCH_TABLE))
        .where(text(f"{SQLITE_SEARCH_TABLE} MATCH :phrases").bindparams(phrases=" ".join(phrases)))
    )
    return [Listing.id.in_(matches)]


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


def search_criteria(
    model: type[Listing], term: str
) -> tuple[list[ColumnElement[bool]], ColumnElement[int]]:
    """The criteria that find every word of `term` in `model`'s search text, and the
    relevance to order the hits by: the name equal to the term first, then starting with
    it, then containing it, then the rest."""
    folded = fold(term)
    words = folded.split()
    criteria = [
        *sqlite_search_index(words),
        *(model.search_text.like(f"%{escape_like(word)}%", escape="\\") for word in words),
    ]
    whole = escape_like(folded)
    relevance = case(
        (model.search_name == folded, 0),
        (model.search_name.like(f"{whole}%", escape="\\"), 1),
        (model.search_name.like(f"%{whole}%", escape="\\"), 2),
        else_=3,
    )
    return criteria, relevance
