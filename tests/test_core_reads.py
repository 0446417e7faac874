"""A read's Core statements without the ORM session (platform/reads.py): what they see,
and how many connections a request holds."""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event, select, text
from werkzeug.test import Client

from directory_api.models import Location, Region
from directory_api.platform import reads
from directory_api.platform.extensions import db

from .conftest import query_plan
from .factories import PASSWORD, make_listing, make_location, make_region

REGIONS = Region.__table__


@contextmanager
def connections_held(app, *, every_pool: bool = False) -> Iterator[dict[str, int]]:
    """How many connections of the engine that serves reads (`every_pool`: of it and the
    engine's own together, one pool on SQLite) are checked out: now, at most, and how many
    checkouts there were."""
    engines = {reads.autocommit_engine(db.engine)}
    if every_pool:
        engines.add(db.engine)
    held = {"now": 0, "most": 0, "checkouts": 0}

    def checkout(*_args) -> None:
        held["now"] += 1
        held["checkouts"] += 1
        held["most"] = max(held["most"], held["now"])

    def checkin(*_args) -> None:
        held["now"] -= 1

    for engine in engines:
        event.listen(engine.pool, "checkout", checkout)
        event.listen(engine.pool, "checkin", checkin)
    try:
        yield held
    finally:
        for engine in engines:
            event.remove(engine.pool, "checkout", checkout)
            event.remove(engine.pool, "checkin", checkin)


def fresh_session() -> None:
    db.session.remove()  # the test's own session holds nothing: as a request starts


def test_a_read_s_core_statements_make_no_session_and_return_their_connection(app):
    make_region("north")
    fresh_session()
    with connections_held(app) as held, app.test_request_context("/regions/"):
        assert reads.scalar(select(REGIONS.c.slug)) == "north"
        assert [row.slug for row in reads.rows(select(REGIONS.c.slug))] == ["north"]
        assert reads.first(select(REGIONS.c.name)).name == "North"
        assert not db.session.registry.has()  # no ORM session was made
        assert held == {"now": 1, "most": 1, "checkouts": 1}  # one connection for all three
    assert held["now"] == 0  # back in the pool when the request ended


def test_the_session_takes_the_read_over_with_one_connection_at_a_time(app):
    make_location("harbour")
    fresh_session()
    with connections_held(app) as held:
        with app.test_request_context("/locations/harbour/"):
            assert reads.scalar(select(Location.__table__.c.slug)) == "harbour"
            location = db.session.scalar(select(Location))  # an ORM read after the Core one
            assert location.slug == "harbour"
            assert reads.scalar(select(Location.__table__.c.name)) == "Harbour"  # the session's
            assert held["most"] == 1
            assert held["checkouts"] == 2  # the Core read's connection went back first
        db.session.remove()  # as the request's end does (the test's app context outlives it)
        assert held["now"] == 0


def test_outside_a_read_they_see_the_transaction_s_own_writes(app):
    fresh_session()
    with app.test_request_context("/regions/", method="POST"):
        db.session.add(Region(slug="lakes", name="Lakes"))
        db.session.flush()
        assert reads.scalar(select(REGIONS.c.name).where(REGIONS.c.slug == "lakes")) == "Lakes"
        db.session.rollback()
    assert db.session.scalar(select(Region).where(Region.slug == "lakes")) is None


def test_list_pages_search_and_a_304_take_one_connection_each(client, app):
    location = make_location("harbour")
    for name in ("Cafe", "Bakery"):
        make_listing("business", location, name.lower(), name=name)
    fresh_session()
    with connections_held(app) as held:
        page = client.get("/locations/harbour/businesses/?sort=name")
        again = client.get(
            "/locations/harbour/businesses/?sort=name",
            headers={"If-None-Match": page.headers["ETag"]},
        )
        found = client.get("/locations/harbour/businesses/search/bakery")
        regions = client.get("/regions/")
    assert page.status_code == 200
    assert [item["name"] for item in page.get_json()["items"]] == ["Bakery", "Cafe"]
    assert page.get_json()["total"] == 2
    assert again.status_code == 304
    assert [item["name"] for item in found.get_json()["items"]] == ["Bakery"]
    assert regions.get_json()["total"] == 0
    # One connection a request, checked out once, and every one back in the pool.
    assert held == {"now": 0, "most": 1, "checkouts": 4}


def test_a_list_of_orm_objects_checks_out_once(client, app):
    make_location("harbour")
    make_location("lakeside")
    fresh_session()
    with connections_held(app) as held:
        response = client.get("/locations/")
        db.session.remove()  # as the request's end does (the test's app context outlives it)
    assert [item["slug"] for item in response.get_json()["items"]] == ["harbour", "lakeside"]
    assert response.get_json()["total"] == 2
    assert held == {"now": 0, "most": 1, "checkouts": 1}


def test_a_request_within_another_has_its_own_connection(app, app_factory):
    other = app_factory()
    make_region("north")
    fresh_session()
    with app.test_request_context("/regions/") as outer:
        reads.scalar(select(REGIONS.c.slug))
        mine = outer.read_connection
        with other.test_request_context("/regions/") as inner:
            reads.scalar(select(REGIONS.c.slug))
            theirs = inner.read_connection
            assert theirs is not mine
            assert theirs.engine is reads.autocommit_engine(db.engine)  # the other app's
        assert not mine.closed  # the inner request's end returned its own, not this one
        assert reads.scalar(select(REGIONS.c.name)) == "North"


def test_requests_served_in_one_context_leave_no_connection_behind(app):
    """As a server's thread serves them: one context for many requests (the test client
    gives each its own)."""
    make_region("north")
    fresh_session()
    server = Client(app.wsgi_app)
    with connections_held(app) as held:
        for _ in range(3):
            assert server.get("/regions/").status_code == 200
    assert held == {"now": 0, "most": 1, "checkouts": 3}


@pytest.mark.parametrize(
    "path", ["/locations/harbour/votes/export.csv", "/locations/harbour/businesses/export.csv"]
)
def test_a_token_s_export_holds_one_connection_at_a_time(app, clients, world, path):
    """An export reads in a transaction (its rows stream from a server-side cursor); the
    token that signs it in is looked up first. Both on one connection, not one of each
    pool."""
    made = clients["owner"].post(
        "/me/tokens/",
        json={"name": "export", "password": PASSWORD, "scopes": ["directory:read", "votes:read"]},
    )
    assert made.status_code == 201, made.get_json()
    script = app.test_client()
    fresh_session()
    with connections_held(app, every_pool=True) as held:
        exported = script.get(path, headers={"Authorization": f"Bearer {made.json['token']}"})
        assert exported.status_code == 200
        assert exported.mimetype == "text/csv"
        exported.get_data()
        exported.close()
    assert (held["now"], held["most"]) == (0, 1)


def test_rows_found_by_a_bound_list_of_any_text(app):
    """A page's rows are read by the ids its first statement found, bound as one list
    (sql.among_bound: an array on PostgreSQL, an expanding IN on SQLite): any text is
    among them as itself, whatever it holds, and one list as long as a whole batch is
    bound as easily as one id."""
    from sqlalchemy import bindparam

    from directory_api.models import Category
    from directory_api.platform.sql import among_bound

    from .factories import make_category

    names = ['Quoted "name"', "Back\\slash", "comma, {brace}", "NULL", "plain"]
    for number, name in enumerate(names):
        make_category(f"c-{number}", name)
    make_category("left-out", "Left out")
    found = select(Category.name).where(among_bound(Category.name, bindparam("page_ids")))
    assert sorted(db.session.scalars(found, {"page_ids": [*names, "absent"]})) == sorted(names)
    assert db.session.scalars(found, {"page_ids": []}).all() == []
    assert db.session.scalars(found, {"page_ids": ["x"] * 5000 + ["plain"]}).all() == ["plain"]


def test_rows_found_by_a_bound_list_are_found_by_their_index(app):
    """The list is matched along the ids' index, on either database (SQLite would scan
    every row for `id IN (…) = 1`, as it writes a boolean expression)."""
    import uuid

    from sqlalchemy import bindparam

    from directory_api.models import Listing
    from directory_api.platform.sql import among_bound

    listings = Listing.__table__
    found = select(listings.c.slug).where(among_bound(listings.c.id, bindparam("page_ids")))
    sent = []

    def keep(_connection, _cursor, statement, parameters, _context, _many) -> None:
        sent.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", keep)
    try:
        db.session.execute(found, {"page_ids": [uuid.uuid4() for _ in range(3)]}).all()
    finally:
        event.remove(db.engine, "before_cursor_execute", keep)
    [(statement, parameters)] = sent
    sqlite = db.engine.dialect.name == "sqlite"
    if not sqlite:  # few rows: only a scan's refusal shows what the index can serve
        db.session.execute(text("SET LOCAL enable_seqscan = off"))
    plan = query_plan(statement, parameters)
    assert ("SEARCH listings USING INDEX" in plan) if sqlite else ("Index" in plan), plan
