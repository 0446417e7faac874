"""The hooks Alembic's autogenerate uses (`flask db migrate`, `flask db check`): how it writes
the app's own column types, and which schema items it compares on which database."""

from collections.abc import Callable

from .types import EncryptedText, UTCDateTime


def render_migration_type(type_: str, obj: object, _context: object) -> str | bool:
    """Write UTCDateTime and EncryptedText as the plain column types they store."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, EncryptedText):
        return "sa.Text()"
    return False


def include_in_migrations(unmapped: tuple[str, ...] = ()) -> Callable[..., bool]:
    """The `include_object` hook: a schema item marked `info={"only_on": dialect}` is
    compared only there, and the tables a migration made by hand that no model maps (names
    starting with one of `unmapped`: a full-text table and its shadow tables) are left alone."""

    def include(obj: object, name: str, type_: str, reflected: bool, compare_to: object) -> bool:
        if type_ == "table" and reflected and name.startswith(unmapped):
            return False
        only_on = getattr(obj, "info", {}).get("only_on") if not reflected else None
        if only_on is None and reflected and compare_to is not None:
            only_on = getattr(compare_to, "info", {}).get("only_on")
        if only_on is None:
            return True
        from alembic import context

        return context.get_context().dialect.name == only_on

    return include
