"""The hooks Alembic's autogenerate uses (`flask db migrate`, `flask db check`): how it writes
the app's own column types, and which schema items it compares on which database."""

from .types import EncryptedText, UTCDateTime


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
    # Imported here: search.py needs the models, which need the extensions, which need this.
    from .search import SQLITE_SEARCH_TABLE

    if type_ == "table" and reflected and name.startswith(SQLITE_SEARCH_TABLE):
        return False  # migration 0003's FTS5 table and its shadow tables
    only_on = getattr(obj, "info", {}).get("only_on") if not reflected else None
    if only_on is None and reflected and compare_to is not None:
        only_on = getattr(compare_to, "info", {}).get("only_on")
    if only_on is None:
        return True
    from alembic import context

    return context.get_context().dialect.name == only_on
