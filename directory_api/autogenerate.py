"""The hooks Alembic's autogenerate uses (`flask db migrate`, `flask db check`): how it writes
the app's own column types, and which schema items it compares on which database."""

from .types import EncryptedText, UTCDateTime

# SQLite's full-text table of listings (search.py), which migration 0003 makes by hand and
# no model maps: autogenerate leaves it and its shadow tables alone.
SQLITE_SEARCH_TABLE = "listings_fts"


def render_migration_type(type_: str, obj: object, _context: object) -> str | bool:
    """Write UTCDateTime and EncryptedText as the plain column types they store."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, EncryptedText):
        return "sa.Text()"
    return False


def include_in_migrations(
    obj: object, name: str, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Compare a schema item marked `info={"only_on": dialect}` only there."""
    if type_ == "table" and reflected and name.startswith(SQLITE_SEARCH_TABLE):
        return False  # migration 0003's FTS5 table and its shadow tables
    only_on = getattr(obj, "info", {}).get("only_on") if not reflected else None
    if only_on is None and reflected and compare_to is not None:
        only_on = getattr(compare_to, "info", {}).get("only_on")
    if only_on is None:
        return True
    from alembic import context

    return context.get_context().dialect.name == only_on
