"""Test data, written straight to the database."""

from typing import Any

from directory_api.credentials import hash_password
from directory_api.models import (
    Business,
    Category,
    Employer,
    ListingSocial,
    Location,
    Membership,
    Region,
    Role,
    Social,
    User,
    Vote,
    VoteType,
)
from directory_api.platform.extensions import db

PASSWORD = "correct horse battery"


def save(obj: Any) -> Any:
    db.session.add(obj)
    db.session.commit()
    return obj


def make_user(email: str, *, password: str | None = PASSWORD, **fields: Any) -> User:
    return save(
        User(email=email, password_hash=hash_password(password) if password else None, **fields)
    )


def make_region(slug: str = "north", name: str | None = None) -> Region:
    return save(Region(slug=slug, name=name or slug.title()))


def make_category(slug: str, name: str | None = None, parent: Category | None = None) -> Category:
    return save(Category(slug=slug, name=name or slug.title(), parent=parent))


def make_social(slug: str = "instagram", url: str | None = "https://www.instagram.com") -> Social:
    return save(Social(slug=slug, name=slug.title(), url=url))


def make_location(slug: str = "harbour", region: Region | None = None, **fields: Any) -> Location:
    return save(Location(slug=slug, name=fields.pop("name", slug.title()), region=region, **fields))


def make_listing(kind: str, location: Location, slug: str, **fields: Any) -> Any:
    return save(build_listing(kind, location, slug, **fields))


def build_listing(kind: str, location: Location, slug: str, **fields: Any) -> Any:
    """A listing not yet saved, for fixtures that write many rows in one commit."""
    model = Business if kind == "business" else Employer
    socials = fields.pop("socials", [])
    listing = model(location=location, slug=slug, name=fields.pop("name", slug.title()), **fields)
    listing.socials = [
        ListingSocial(social=social, url=url, position=position)
        for position, (social, url) in enumerate(socials)
    ]
    return listing


def grant(user: User, location: Location, role: Role) -> Membership:
    return save(Membership(user_id=user.id, location_id=location.id, role=role))


def make_vote(location: Location, **fields: Any) -> Vote:
    """An employer vote at `location` (inactive unless `active=True`); fields override."""
    defaults = {
        "type": VoteType.EMPLOYER,
        "your_name": "Val Voter",
        "your_email": "val@example.com",
        "business_name": "Acme",
        "vote_body": "Good",
    }
    return save(Vote(location_id=location.id, **(defaults | fields)))
