"""Output schemas dump through compiled plans: the result must be marshmallow's own."""

import inspect

import orjson
import pytest
from marshmallow import Schema, fields

from directory_api.models import Role, VoteType, utcnow
from directory_api.platform.extensions import db
from directory_api.platform.output import PlannedDump
from directory_api.schemas import categories, listings, locations, regions, socials, users, votes
from directory_api.schemas.base import Resource

from .factories import (
    grant,
    make_category,
    make_listing,
    make_location,
    make_region,
    make_social,
    make_user,
    make_vote,
)

MODULES = (categories, listings, locations, regions, socials, users, votes)
OUTPUTS = sorted(
    {
        cls
        for module in MODULES
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, Resource) and cls is not Resource
    },
    key=lambda cls: cls.__name__,
)


@pytest.fixture
def objects(app):
    """One of each kind of stored thing, with nulls and nested values both present."""
    with app.app_context():
        north = make_region("north")
        food = make_category("food")
        cafes = make_category("cafes", "Cafés", parent=food)
        instagram, facebook = make_social("instagram"), make_social("facebook", url=None)
        harbour = make_location("harbour", region=north, email="h@example.org")
        bare = make_location("bare")
        business = make_listing(
            "business",
            harbour,
            "apple",
            subcategory=cafes,
            branch="Quay",
            socials=[(instagram, "https://i.example/a"), (facebook, "https://f.example/a")],
        )
        employer = make_listing("employer", harbour, "works")
        owner = make_user("owner@example.org", name="Olive", phone="+44 1")
        grant(owner, harbour, Role.OWNER)
        grant(owner, bare, Role.ADMIN)
        invited = make_user("invited@example.org", password=None)
        vote = make_vote(
            harbour,
            employer=employer,
            your_name="V",
            your_email="v@example.org",
            business_name="Works",
            vote_body="Good.",
        )
        plain_vote = make_vote(
            harbour,
            type=VoteType.BTOC,
            active=True,
            your_name="W",
            your_email="w@example.org",
            your_phone="+44 2",
            business_name="Apple",
            vote_body="Nice.",
            reply_body="Thank you.",
            reply_author_id=owner.id,
            reply_created_at=utcnow(),
            reply_updated_at=utcnow(),
        )
        yield {
            "RegionOut": [north],
            "CategoryOut": [food, cafes],
            "SocialOut": [instagram, facebook],
            "LocationOut": [harbour, bare],
            "ListingOut": [business, employer],
            "UserOut": [owner, invited],
            "VoteOut": [vote, plain_vote],
            "PublicVoteOut": [vote, plain_vote],
            "VoteCsvOut": [vote, plain_vote],
            "SubjectVoteOut": [vote, plain_vote],
        }
        db.session.rollback()


def test_every_output_schema_dumps_through_a_plan():
    assert OUTPUTS, "no output schemas found"
    assert all(issubclass(cls, PlannedDump) for cls in OUTPUTS)


@pytest.mark.parametrize("schema_class", OUTPUTS, ids=lambda cls: cls.__name__)
def test_a_plan_dumps_what_marshmallow_dumps(objects, schema_class):
    items = objects[schema_class.__name__]
    one, many = schema_class(), schema_class(many=True)
    for item in items:
        assert one.dump(item) == Schema.dump(one, item)
    assert many.dump(items) == Schema.dump(many, items)
    assert one.dump(items, many=True) == Schema.dump(one, items, many=True)


def test_a_plan_reads_dicts_and_leaves_out_what_is_missing():
    class Out(PlannedDump):
        name = fields.String()
        count = fields.Integer()
        tags = fields.List(fields.Nested(type("Tag", (Schema,), {"slug": fields.String()})))
        mapped = fields.String(attribute="other", data_key="renamed")

    rows = [
        {"name": "a", "count": "3", "tags": [{"slug": "x"}], "other": 5},
        {"name": None, "tags": None},
        {},
    ]
    schema = Out(many=True)
    assert schema.dump(rows) == Schema.dump(schema, rows)
    assert schema.dump(rows)[0] == {
        "name": "a",
        "count": 3,
        "tags": [{"slug": "x"}],
        "renamed": "5",
    }
    assert schema.dump(rows)[2] == {}


def test_fields_without_a_shortcut_and_hooks_keep_marshmallows_behaviour():
    from marshmallow import post_dump

    class Hooked(PlannedDump):
        name = fields.String()
        shout = fields.Function(lambda obj: obj["name"].upper())

        @post_dump
        def mark(self, data, **kwargs):
            return {**data, "hooked": True}

    assert Hooked().dump({"name": "a"}) == {"name": "a", "shout": "A", "hooked": True}


# Output written by the database (sql.json_of): the list, search and export of listings.

HOSTILE_TEXT = 'Café "quoted" \\ back\nline\ttab \u0001 \u2028 😀 </script> \' OR 1=1 --'


@pytest.fixture
def written_listings(app):
    """Listings whose every output value is awkward to write as JSON, with and without
    links, and timestamps at both ends of a millisecond."""
    from datetime import UTC, datetime

    with app.app_context():
        harbour = make_location("harbour")
        cafes = make_category("cafes", "Cafés", parent=make_category("food"))
        instagram, facebook = make_social("instagram"), make_social("facebook")
        full = make_listing(
            "business",
            harbour,
            "full",
            name=HOSTILE_TEXT,
            subcategory=cafes,
            description=HOSTILE_TEXT * 3,
            branch="Quay",
            email="a@example.org",
            phone="+44 1",
            address=HOSTILE_TEXT,
            website="https://example.org/?a=1&b=%22",
            socials=[(facebook, 'https://f.example/"q"'), (instagram, "https://i.example/a")],
        )
        bare = make_listing("business", harbour, "bare", name="Bare")
        full.created_at = datetime(2026, 1, 2, 3, 4, 5, 999999, tzinfo=UTC)
        full.updated_at = datetime(2026, 1, 2, 3, 4, 5, 0, tzinfo=UTC)
        db.session.commit()
        expected = Schema.dump(listings.ListingOut(many=True), [bare, full])  # sorted by name
        yield expected


def test_the_database_writes_listings_as_marshmallow_dumps_them(client, written_listings):
    page = client.get("/locations/harbour/businesses/")
    assert page.status_code == 200
    assert page.json["items"] == written_listings
    found = client.get("/locations/harbour/businesses/search/quay")
    assert found.json["items"] == [written_listings[1]]
    one = client.get("/locations/harbour/businesses/slug/full")  # an ORM object, dumped
    assert one.json == written_listings[1]


def test_what_the_database_writes_is_byte_for_byte_the_services_json(client, written_listings):
    """Issue 35: PostgreSQL wrote `{"id" : …}` where SQLite and the service's own encoder
    write `{"id":…}`: an answer's bytes (its ETag with them) differed by database. Each
    page is compared with its own JSON encoded again by the service's encoder."""
    from directory_api.platform.json_provider import OPTIONS

    for path in (
        "/locations/harbour/businesses/",
        "/locations/harbour/businesses/search/quay",
        "/regions/",
    ):
        page = client.get(path)
        assert page.status_code == 200
        assert page.get_data() == orjson.dumps(page.get_json(), option=OPTIONS), path


@pytest.mark.parametrize(
    ("path", "schema_class"), [("/regions/", regions.RegionOut), ("/socials/", socials.SocialOut)]
)
def test_the_database_writes_reference_lists_as_marshmallow_dumps_them(
    client, objects, path, schema_class
):
    items = sorted(objects[schema_class.__name__], key=lambda item: (item.name, str(item.id)))
    page = client.get(path)
    assert page.status_code == 200
    assert page.json["items"] == Schema.dump(schema_class(many=True), items)
    assert page.json["total"] == len(items)


def test_the_database_writes_vote_results_as_marshmallow_dumps_them(client, app):
    harbour = make_location("harbour")
    counted = []
    for slug, name, count in (("w", HOSTILE_TEXT, 5), ("a", "Able", 5), ("m", "Mill", 2)):
        employer = make_listing("employer", harbour, slug, name=name)
        employer.vote_count = count
        counted.append(employer)
    make_listing("employer", harbour, "none", name="No votes")  # not in the results
    db.session.commit()
    page = client.get("/locations/harbour/votes/results")
    assert page.status_code == 200
    expected = sorted(counted, key=lambda e: (-e.vote_count, e.name))
    assert page.json["items"] == Schema.dump(votes.VoteResultOut(many=True), expected)
    assert page.json["total"] == 3


def test_json_of_refuses_what_it_would_write_differently_from_the_dump():
    """Each would be written without error and differ from marshmallow's dump: refused."""
    from marshmallow import post_dump

    from directory_api.models import Listing, OutboxMessage
    from directory_api.platform.sql import json_of

    listings = Listing.__table__.c

    class Hooked(Schema):
        name = fields.String()

        @post_dump
        def mark(self, data, **kwargs):
            return data

    cases = [
        (Hooked(), {"name": listings.name}, "dump hooks"),
        (
            type("When", (Schema,), {"when": fields.DateTime()})(),
            {"when": listings.created_at},
            "DateTime",
        ),
        # A column of another type: SQL would write its raw value.
        (type("S", (Schema,), {"id": fields.String()})(), {"id": listings.id}, "String over"),
        (
            type("T", (Schema,), {"at": fields.String()})(),
            {"at": listings.created_at},
            "String over",
        ),
        # Text Python decrypts: the database holds the ciphertext.
        (
            type("B", (Schema,), {"body": fields.String()})(),
            {"body": OutboxMessage.__table__.c.body},
            "String over",
        ),
        (
            type("N", (Schema,), {"n": fields.Integer(as_string=True)})(),
            {"n": listings.name},
            "Integer",
        ),
        (
            type("D", (Schema,), {"n": fields.String(dump_default="x")})(),
            {"n": listings.name},
            "String",
        ),
        (
            type("L", (Schema,), {"l": fields.List(fields.Nested(Hooked))})(),
            {"l": listings.name},
            "List",
        ),
        (
            type("K", (Schema,), {"k": fields.String(data_key="it's")})(),
            {"k": listings.name},
            "quote",
        ),
    ]
    for schema, sources, message in cases:
        with pytest.raises(TypeError, match=message):
            json_of(schema, sources)


def test_the_database_writes_ids_and_timestamps_as_the_dump_does(app):
    """sql.uuid_text and sql.timestamp_text: as str(uuid) and the dump's timestamp_text
    write them (milliseconds cut, not rounded), NULL as NULL; on SQLite a timestamp
    stored without its fraction (not written by SQLAlchemy) reads as .000."""
    import uuid
    from datetime import UTC, datetime

    from sqlalchemy import Uuid, literal, literal_column, null, select

    from directory_api.platform.output import timestamp_text as dumped_timestamp
    from directory_api.platform.sql import timestamp_text, uuid_text
    from directory_api.platform.types import UTCDateTime

    some = uuid.uuid4()
    moments = [
        datetime(2026, 1, 2, 3, 4, 5, 999999, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 1000, tzinfo=UTC),
    ]
    with app.app_context():
        row = db.session.execute(
            select(
                uuid_text(literal(some, Uuid())),
                uuid_text(null().cast(Uuid())),
                timestamp_text(null().cast(UTCDateTime())),
                *(timestamp_text(literal(moment, UTCDateTime())) for moment in moments),
            )
        ).one()
        assert list(row) == [str(some), None, None, *map(dumped_timestamp, moments)]
        assert [dumped_timestamp(moment) for moment in moments[:2]] == [
            "2026-01-02T03:04:05.999Z",
            "2026-01-02T03:04:05.000Z",
        ]
        if db.engine.dialect.name == "sqlite":
            stored = literal_column("'2026-01-02 03:04:05'", UTCDateTime())
            written = db.session.scalar(select(timestamp_text(stored)))
            assert written == "2026-01-02T03:04:05.000Z"
