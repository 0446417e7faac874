"""SQL column types the models share: UTC datetimes (and the clock they hold), encrypted
text, StrEnums kept as strings; and the UUID primary key every table has."""

import enum
import uuid
from datetime import UTC, datetime

from sqlalchemy import DateTime, Enum, Text, TypeDecorator, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from .crypto import decrypt, encrypt


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
        return encrypt(value) if value else value

    def process_result_value(self, value: str | None, dialect) -> str | None:
        return decrypt(value) if value else value


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


class IdMixin:
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
