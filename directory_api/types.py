"""Column types that stand apart from the models, and the hooks Alembic's autogenerate uses."""

import enum
from datetime import UTC, datetime

from sqlalchemy import DateTime, Enum, Text, TypeDecorator


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every database (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class EncryptedText(TypeDecorator[str]):
    """Text kept encrypted in the database (crypto.py), plain to the code that reads it.

    The empty string stays empty: it is what a delivered message's body becomes. A value no
    configured key opens reads as None.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect) -> str | None:
        from .crypto import encrypt

        return encrypt(value) if value else value

    def process_result_value(self, value: str | None, dialect) -> str | None:
        from .crypto import decrypt

        return decrypt(value) if value else value


def render_migration_type(type_: str, obj: object, _context: object) -> str | bool:
    """Alembic autogenerate: write UTCDateTime as the plain column type it stores."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, EncryptedText):
        return "sa.Text()"
    return False


def string_enum(enum_cls: type[enum.StrEnum], name: str, length: int = 16) -> Enum:
    """A StrEnum kept as its values in a VARCHAR with a CHECK (the same on every database)."""
    return Enum(
        enum_cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=length,
        values_callable=lambda members: [member.value for member in members],
    )


def include_in_migrations(
    obj: object, name: str, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Alembic autogenerate: compare a schema item marked `info={"only_on": dialect}` only there."""
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
