"""Demo data for `flask seed-demo`: what it takes to see the product.

Reference lists, two locations with a few hundred businesses and employers (enough to page
through, named from a few shared words so that a search ranks exact names, then names
that start with the term, then mere mentions), an owner and an admin with known passwords,
and votes in every state staff meet: pending, active, confirmed, a duplicate, redacted.

Deterministic and offline. The listings and votes are written as rows in bulk (bypassing
the ORM, as `flask listings recount` expects), then the stored counts are recounted, all in
the caller's one transaction. What is already there is left as it is: listings by slug,
users by address, roles by location, and a location's votes if it has any, so seeding
again adds nothing and changes no password.
"""

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select

from .credentials import hash_password
from .models import (
    Category,
    Listing,
    ListingSocial,
    Location,
    Membership,
    Region,
    Role,
    Social,
    User,
    Vote,
    VoteType,
    utcnow,
)
from .platform.crypto import email_hash
from .platform.extensions import db
from .platform.slugs import name_slug
from .search import fold, search_text

REGIONS = {"north": "North", "south": "South", "east": "East", "west": "West"}
CATEGORIES = {
    ("food-drink", "Food & Drink"): {
        "cafes": "Cafés",
        "restaurants": "Restaurants",
        "bakeries": "Bakeries",
    },
    ("services", "Services"): {"plumbers": "Plumbers", "electricians": "Electricians"},
    ("retail", "Retail"): {"bookshops": "Bookshops", "clothing": "Clothing"},
}
SOCIALS = {
    "facebook": ("Facebook", "https://www.facebook.com"),
    "instagram": ("Instagram", "https://www.instagram.com"),
    "linkedin": ("LinkedIn", "https://www.linkedin.com"),
}
LOCATIONS: list[dict[str, Any]] = [
    {
        "slug": "harbour-town",
        "name": "Harbour Town",
        "region": "north",
        "directory_location": True,
        "email": "hello@harbour-town.example",
        "description": "A fishing town turned creative hub.",
        # Named listings first (README's examples use them), then this many generated.
        "businesses": [
            ("cafe-zurich", "Café Zürich", "cafes", "Harbour Front"),
            ("the-old-bakery", "The Old Bakery", "bakeries", None),
            ("page-turners", "Page Turners", "bookshops", "Market Street"),
        ],
        "employers": [("harbour-electric", "Harbour Electric", "electricians", None)],
        "generated": {"business": 240, "employer": 30},
        "popular_employers": 8,  # the first this many employers get votes
    },
    {
        "slug": "hill-village",
        "name": "Hill Village",
        "region": "south",
        "directory_location": False,
        "email": None,
        "description": "A village on the hill with a weekly market.",
        "businesses": [
            ("hilltop-kitchen", "Hilltop Kitchen", "restaurants", None),
            ("village-threads", "Village Threads", "clothing", "High Street"),
        ],
        "employers": [("pipe-dreams", "Pipe Dreams Plumbing", "plumbers", None)],
        "generated": {"business": 110, "employer": 20},
        "popular_employers": 4,
    },
]

# Generated names are a word and a trade: "Harbour Café", "Harbour Books", "Old Harbour
# Bakehouse" … Each trade belongs to one subcategory, so no two names are the same.
WORDS = (
    "Harbour",
    "Old Harbour",
    "Quay",
    "Market",
    "Corner",
    "Golden",
    "Blue Door",
    "Little",
    "Village",
    "Green",
    "Anchor",
    "Lighthouse",
    "Mill",
    "Station",
    "Bridge",
    "Hilltop",
)
TRADES = {
    "cafes": ("Café", "Coffee House", "Tea Room"),
    "restaurants": ("Kitchen", "Bistro", "Grill"),
    "bakeries": ("Bakery", "Bakehouse", "Patisserie"),
    "bookshops": ("Books", "Bookshop", "Reading Room"),
    "clothing": ("Threads", "Outfitters", "Boutique"),
    "plumbers": ("Plumbing", "Pipes & Drains"),
    "electricians": ("Electrical", "Sparks"),
}
BRANCHES = ("Quay", "Market Street", "High Street", "Station Road")
DESCRIPTIONS = (
    "Family run since {year}, open every day.",
    "Locally owned; everything made on the premises.",
    "A {location} favourite since {year}.",
    "New in {year}, already busy on market days.",
)


@dataclass(frozen=True)
class DemoUser:
    email: str
    name: str
    password: str
    roles: tuple[tuple[str, Role], ...]


# Known passwords for trying the product; they pass the password rules (schemas/passwords.py).
DEMO_USERS = (
    DemoUser(
        "demo-owner@example.com",
        "Demo Owner",
        "demo owner passphrase",
        (("harbour-town", Role.OWNER), ("hill-village", Role.OWNER)),
    ),
    DemoUser(
        "demo-admin@example.com",
        "Demo Admin",
        "demo admin passphrase",
        (("harbour-town", Role.ADMIN),),
    ),
)

VOTERS = (
    "Ada Lovelace",
    "Ben Okafor",
    "Chloe Martin",
    "Dev Patel",
    "Elena Rossi",
    "Finn Murphy",
    "Grace Lee",
    "Hamid Karimi",
    "Isla Brown",
    "Jonas Berg",
)
POSITIONS = ("Apprentice", "Barista", "Electrician", "Shop assistant", "Manager", "Plumber")
VOTE_BODIES = (
    "Fair pay and a team that looks after each other.",
    "Great training; I learnt more here in a year than anywhere else.",
    "Flexible hours that work with school runs.",
    "Good employer, though the shifts can be long in summer.",
    "They promoted from within when a manager left.",
)
# Each vote's state, by its number: a cycle, so every state turns up at every location.
STATES = ("pending", "active", "confirmed", "active", "confirmed", "redacted")


def seed() -> dict[str, int]:
    """Add whatever of the demo data is missing; returns how many rows of each kind it
    added. The caller commits."""
    regions = {slug: _get_or_create(Region, slug, name=name) for slug, name in REGIONS.items()}
    categories = {}
    for (slug, name), children in CATEGORIES.items():
        parent = _get_or_create(Category, slug, name=name)
        for child_slug, child_name in children.items():
            categories[child_slug] = _get_or_create(
                Category, child_slug, name=child_name, parent=parent
            )
    socials = {
        slug: _get_or_create(Social, slug, name=name, url=url)
        for slug, (name, url) in SOCIALS.items()
    }
    added = {"listings": 0, "votes": 0, "users": 0}
    locations = {}
    for spec in LOCATIONS:
        location = locations[spec["slug"]] = _get_or_create(
            Location,
            spec["slug"],
            name=spec["name"],
            region=regions[spec["region"]],
            directory_location=spec["directory_location"],
            email=spec["email"],
            description=spec["description"],
        )
        added["listings"] += _add_listings(location, spec, categories, socials["instagram"])
        added["votes"] += _add_votes(location, spec)
    added["users"] = _add_users(locations)
    return added


def _get_or_create(model: Any, slug: str, **fields: Any) -> Any:
    found = db.session.scalar(select(model).where(model.slug == slug))
    if found is None:
        found = model(slug=slug, **fields)
        db.session.add(found)
        db.session.flush()
    return found


def listing_specs(spec: dict[str, Any], kind: str) -> list[tuple[str, str, str, str | None]]:
    """(slug, name, subcategory, branch) of a location's listings of `kind`: the named ones,
    then generated ones, the same on every run."""
    named = spec["businesses" if kind == "business" else "employers"]
    names = [(f"{word} {trade}", sub) for word in WORDS for sub in TRADES for trade in TRADES[sub]]
    # Its own order per location and kind; the businesses and employers of a location share
    # no name.
    random.Random(spec["slug"]).shuffle(names)  # noqa: S311 (an order, not a secret)
    wanted = spec["generated"]
    start = 0 if kind == "business" else wanted["business"]
    generated = [
        (name_slug(name), name, sub, BRANCHES[number % 4] if number % 5 == 0 else None)
        for number, (name, sub) in enumerate(names[start : start + wanted[kind]])
    ]
    taken = {slug for slug, *_ in named}
    return named + [listing for listing in generated if listing[0] not in taken]


def _add_listings(
    location: Location, spec: dict[str, Any], categories: dict[str, Category], social: Social
) -> int:
    now = utcnow()
    rows, links = [], []
    for kind in ("business", "employer"):
        have = set(
            db.session.scalars(
                select(Listing.slug).where(Listing.location_id == location.id, Listing.kind == kind)
            )
        )
        for number, (slug, name, sub, branch) in enumerate(listing_specs(spec, kind)):
            if slug in have:
                continue
            description = DESCRIPTIONS[number % len(DESCRIPTIONS)].format(
                year=1950 + number % 70, location=location.name
            )
            listing_id = uuid.uuid4()
            rows.append(
                {
                    "id": listing_id,
                    "kind": kind,
                    "location_id": location.id,
                    "slug": slug,
                    "name": name,
                    "subcategory_id": categories[sub].id,
                    "branch": branch,
                    "description": description,
                    "email": None,
                    "phone": f"+44 20 7946 {number:04d}" if number % 4 == 0 else None,
                    "address": None,
                    "website": f"https://{slug}.example" if number % 3 == 0 else None,
                    "search_name": fold(name),
                    "search_text": search_text(name, branch, description, categories[sub].name),
                    "created_at": now - timedelta(minutes=number),
                    "updated_at": now - timedelta(minutes=number),
                }
            )
            if number % 2 == 0:
                url = f"{social.url}/{slug.replace('-', '')}"
                links.append(
                    {"listing_id": listing_id, "social_id": social.id, "url": url, "position": 0}
                )
    if rows:
        db.session.execute(insert(Listing.__table__), rows)
    if links:
        db.session.execute(insert(ListingSocial.__table__), links)
    return len(rows)


def _add_votes(location: Location, spec: dict[str, Any]) -> int:
    """Votes for the location's first employers (the first most of all), from a cycle of
    states, plus a duplicate and a business-to-business and a business-to-consumer vote.
    Only for a location without votes: once there, they are the moderators'."""
    if db.session.scalar(select(Vote.id).where(Vote.location_id == location.id).limit(1)):
        return 0
    slugs = [slug for slug, *_ in listing_specs(spec, "employer")][: spec["popular_employers"]]
    found = db.session.execute(
        select(Listing.slug, Listing.id, Listing.name).where(
            Listing.location_id == location.id, Listing.kind == "employer", Listing.slug.in_(slugs)
        )
    )
    employers = sorted(found, key=lambda employer: slugs.index(employer.slug))
    now = utcnow()
    rows: list[dict[str, Any]] = []
    for rank, employer in enumerate(employers):
        for _ in range(len(employers) - rank):  # the first employer gets the most votes
            number = len(rows)
            rows.append(
                _vote_row(location, number, STATES[number % len(STATES)], now)
                | {
                    "type": VoteType.EMPLOYER.value,
                    "employer_id": employer.id,
                    "business_name": employer.name,
                    "your_position": POSITIONS[number % len(POSITIONS)],
                }
            )
    if rows:  # the first vote's address votes for the same employer again: flagged for staff
        first = rows[0]
        rows.append(
            _vote_row(location, len(rows), "pending", now, voter=first["your_name"])
            | {key: first[key] for key in ("type", "employer_id", "business_name", "your_position")}
            | {"duplicate_of_id": first["id"]}
        )
    business = listing_specs(spec, "business")[0][1]
    for kind, extra in ((VoteType.BTOB, {"your_business": "Quay Chandlery"}), (VoteType.BTOC, {})):
        rows.append(
            _vote_row(location, len(rows), "active", now)
            | {"type": kind.value, "employer_id": None, "business_name": business}
            | extra
        )
    keys = {key for row in rows for key in row}
    db.session.execute(insert(Vote.__table__), [dict.fromkeys(keys) | row for row in rows])
    return len(rows)


def _vote_row(
    location: Location, number: int, state: str, now: datetime, voter: str | None = None
) -> dict[str, Any]:
    """The columns every vote has, for a vote in `state` by `voter` (by default the
    number's)."""
    name = voter or VOTERS[number % len(VOTERS)]
    address = f"{name.lower().replace(' ', '.')}@example.net"
    redacted = state == "redacted"  # past PII_RETENTION_DAYS: only the address's hash stays
    created = now - timedelta(days=400 + number if redacted else number % 28, hours=number)
    confirmed = state in ("confirmed", "redacted")
    return {
        "id": uuid.uuid4(),
        "location_id": location.id,
        "active": state != "pending",
        "confirmed": confirmed,
        "confirmed_at": created + timedelta(hours=2) if confirmed else None,
        "your_name": None if redacted else name,
        "your_email": None if redacted else address,
        "your_phone": None if redacted else f"+44 20 7946 1{number:03d}",
        "email_hash": email_hash(address),
        "redacted_at": now if redacted else None,
        "vote_body": VOTE_BODIES[number % len(VOTE_BODIES)],
        "created_at": created,
        "updated_at": created,
    }


def _add_users(locations: dict[str, Location]) -> int:
    """The demo owner and admin, with their passwords and roles, where missing."""
    added = 0
    for demo in DEMO_USERS:
        user = db.session.scalar(select(User).where(User.email == demo.email))
        if user is None:
            user = User(
                email=demo.email, name=demo.name, password_hash=hash_password(demo.password)
            )
            db.session.add(user)
            db.session.flush()
            added += 1
        for slug, role in demo.roles:
            location = locations[slug]
            held = db.session.get(Membership, (user.id, location.id))
            if held is None:
                db.session.add(Membership(user_id=user.id, location_id=location.id, role=role))
    return added
