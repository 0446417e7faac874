"""Column types that stand apart from the models, and the hooks Alembic's autogenerate uses."""

import enum
from datetime import UTC, datetime

from sqlalchemy import DateTime, Enum, TypeDecorator


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


def render_migration_type(type_: str, obj: object, _context: object) -> str | bool:
    """Alembic autogenerate: write UTCDateTime as the plain column type it stores."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
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


SQLITE_SEARCH_TABLE = "listings_fts"


def include_in_migrations(
    obj: object, name: str, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Alembic autogenerate: compare a schema item marked `info={"only_on": dialect}` only there."""
    if type_ == "table" and reflected and name.startswith(SQLITE_SEARCH_TABLE):
        return False  # migration 0003's FTS5 table and its shadow tables
    only_on = getattr(obj, "info", {}).get("only_on") if not reflected else None
    if only_on is None and reflected and compare_to is not None:
        only_on = getattr(compare_to, "info", {}).get("only_on")
    if only_on is None:
        return True
    from alembic import context

    return context.get_context().dialect.name == only_on
