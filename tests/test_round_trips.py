"""What a read costs PostgreSQL: round trips counted on the wire (issue 19).

The app talks to PostgreSQL through a TCP proxy that counts the server's ReadyForQuery
messages, one per round trip, so a ping, a BEGIN or a ROLLBACK would count as surely as a
statement.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from directory_api.models import (
    AuditEntry,
    Listing,
    Location,
    OutboxMessage,
    Region,
    Role,
    User,
    Vote,
    VoteRevision,
)
from directory_api.platform.extensions import db
from directory_api.platform.reads import autocommit_engine

from .conftest import PG_URL, forget_answers, signed_in, statements_run
from .factories import PASSWORD, grant, make_listing, make_location, make_social, make_user
from .faults import RoundTrips, SentToPostgreSQL, tcp_proxy

needs_postgresql = pytest.mark.skipif(
    not PG_URL, reason="counts PostgreSQL's round trips (CI's PostgreSQL pass runs it)"
)
LIST = "/locations/harbour/businesses/?perPage=20"


@pytest.fixture
def round_trips() -> Iterator[tuple[RoundTrips, str]]:
    """A round-trip counter and the URL of the test database through it (no TLS)."""
    counter = RoundTrips()
    url = make_url(PG_URL)
    with tcp_proxy(url.host or "127.0.0.1", url.port or 5432, counter.watcher) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port, query={"sslmode": "disable"})
        yield counter, proxied.render_as_string(False)


@pytest.fixture
def proxied(app_factory, round_trips):
    """Builds an app (with `settings`) whose database is behind the counter, the listed
    location in it, its pool connected: (counter, client) inside its app context."""
    counter, url = round_trips

    @contextmanager
    def build(**settings) -> Iterator[tuple[RoundTrips, object]]:
        app = app_factory(SQLALCHEMY_DATABASE_URI=url, **settings)
        with app.app_context():
            listed_location()
            client = app.test_client()
            assert client.get(LIST).status_code == 200  # the pool connects once
            counter.count = 0
            yield counter, client

    return build


def listed_location() -> None:
    location = make_location("harbour")
    instagram, facebook = make_social("instagram"), make_social("facebook")
    links = [(instagram, "https://i.example/a"), (facebook, "https://f.example/a")]
    for number in range(25):
        make_listing("business", location, f"shop-{number:02}", socials=links if number else [])


def costs(counter: RoundTrips, client, path: str) -> tuple[int, list[str], dict]:
    """Round trips and statements of one request that does its work (no answer kept from
    before), and its JSON body."""
    forget_answers()
    counter.count = 0
    with statements_run() as run:
        response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)
    return counter.count, [executed.sql for executed in run], response.get_json()


@needs_postgresql
def test_a_list_page_is_its_statements_alone(proxied):
    with proxied() as (counter, client):
        trips, statements, body = costs(counter, client, LIST)

    assert [item["slug"] for item in body["items"]] == [f"shop-{n:02}" for n in range(20)]
    assert body["items"][0]["socials"] == []
    assert body["items"][1]["socials"] == [
        {"social": "instagram", "url": "https://i.example/a"},
        {"social": "facebook", "url": "https://f.example/a"},
    ]
    assert body["total"] == 25
    # The page with its links and its location with its stored counts, in one statement:
    # no ping, BEGIN or ROLLBACK.
    assert len(statements) == 1
    assert trips == len(statements)


@needs_postgresql
@pytest.mark.parametrize(
    ("path", "total", "found"),
    [
        # A deep page: its start is kept by the list's revision, known first.
        ("/locations/harbour/businesses/?page=2&perPage=10", 25, ["location", "page"]),
        # A filtered list: counted, not stored (after its page: page_queries.paginate).
        ("/locations/harbour/businesses/?subcategory=none", 0, ["location", "page", "count"]),
        # A first page with no rows: its location alone after it.
        ("/locations/harbour/employers/", 0, ["page", "location"]),
    ],
)
def test_other_pages_find_their_location_apart(proxied, path, total, found):
    with proxied() as (counter, client):
        trips, statements, body = costs(counter, client, path)
    assert trips == len(statements)
    assert [
        "count" if sql.startswith("SELECT count(") else
        "page" if "FROM listings" in sql else
        "location"
        for sql in statements
    ] == found  # fmt: skip
    assert body["total"] == total


@needs_postgresql
def test_a_connection_idle_for_the_setting_is_pinged_first(proxied):
    with proxied(DATABASE_PING_AFTER=0) as (counter, client):
        trips, statements, _ = costs(counter, client, LIST)

    assert trips == len(statements) + 1


def test_a_read_that_writes_is_refused_rather_than_half_done(app):
    with app.test_request_context("/regions/", method="GET"):
        db.session.add(Region(slug="lakes", name="Lakes"))
        with pytest.raises(RuntimeError, match="GET /regions/ tried to write"):
            db.session.flush()
        db.session.rollback()


@needs_postgresql
@pytest.mark.parametrize("asked_with_its_tag", [True, False])
def test_a_list_page_asked_again_is_one_round_trip(proxied, asked_with_its_tag):
    with proxied() as (counter, client):
        first = client.get(LIST)
        headers = {"If-None-Match": first.headers["ETag"]} if asked_with_its_tag else {}
        counter.count = 0
        response = client.get(LIST, headers=headers)

    # A 304, or the answer this process kept, after the location with the list's revision.
    assert (response.status_code, response.data) == (
        (304, b"") if asked_with_its_tag else (200, first.data)
    )
    assert counter.count == 1


@needs_postgresql
@pytest.mark.parametrize(
    "options",
    [
        {"isolation_level": "REPEATABLE READ"},
        {"pool_reset_on_return": "commit"},
        {"pool_size": "3"},
    ],
)
def test_reads_keep_their_engine_whatever_the_engine_options(app_factory, options):
    app = app_factory(SQLALCHEMY_ENGINE_OPTIONS=options, SQLALCHEMY_ECHO=True)
    with app.app_context():
        reads = autocommit_engine(db.engine)
        assert reads is not db.engine
        assert reads.echo is True
        with reads.connect() as connection:
            assert connection.connection.dbapi_connection.autocommit is True
        make_location("harbour")
    assert app.test_client().get(LIST).status_code == 200


@needs_postgresql
@pytest.mark.parametrize("by", ["cookie", "token"])
def test_me_is_one_round_trip(proxied, by):
    """Issue 36: `GET /me/` finds who asks and their roles in one statement, by a session
    or by a token (whose last use is written at most once a minute, after the answer)."""
    with proxied() as (counter, client):
        user = make_user("ann@example.com")
        grant(user, db.session.query(Location).filter_by(slug="harbour").one(), Role.OWNER)
        asking = signed_in(client.application, "ann@example.com")
        headers = {}
        if by == "token":
            made = asking.post(
                "/me/tokens/",
                json={"name": "t", "password": PASSWORD, "scopes": ["directory:read"]},
            )
            headers = {"Authorization": f"Bearer {made.get_json()['token']}"}
            asking = client.application.test_client()
        assert asking.get("/me/", headers=headers).status_code == 200  # a token's use noted
        counter.count = 0
        response = asking.get("/me/", headers=headers)
        trips = counter.count

    assert response.get_json()["roles"] == [{"location": "harbour", "role": "owner"}]
    assert trips == 1


@needs_postgresql
def test_a_sign_in_is_its_three_statements_in_one_transaction(proxied):
    """Issue 36: the account with its roles, the last sign-in, the audit entry; the answer
    is what was written, not read again (it was 9 round trips)."""
    with proxied() as (counter, client):
        user = make_user("ann@example.com")
        grant(user, db.session.query(Location).filter_by(slug="harbour").one(), Role.OWNER)
        db.session.commit()
        counter.count = 0
        with statements_run() as run:
            response = client.post(
                "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
            )
        trips = counter.count
        db.session.expire_all()
        stored = db.session.get(User, user.id).last_login_at
        entries = db.session.scalars(select(AuditEntry.action)).all()

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["roles"] == [{"location": "harbour", "role": "owner"}]
    # What was written, as it was written (to the millisecond, as answers show time).
    assert body["lastLoginAt"] == stored.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert entries == ["auth.login"]
    assert [executed.sql.split()[0] for executed in run] == ["SELECT", "UPDATE", "INSERT"]
    # The account before any transaction; BEGIN, the last sign-in and the audit entry in
    # one round trip (platform/with_commit.py); COMMIT. It was 5.
    assert trips == 3


EMPLOYER_VOTE = {
    "yourName": "Ann Voter",
    "yourEmail": "ann.voter@example.com",
    "yourPhone": "+44 20 7946 0018",
    "businessName": "Mill",
    "businessBranch": "Harbour Front",
    "employer": "mill",
    "voteBody": "Fair pay.",
    "yourPosition": "Baker",
}


@needs_postgresql
@pytest.mark.parametrize(
    ("named", "votes_read", "trips"),
    [
        # The location; the employer with its voter's earlier vote and receipts; BEGIN
        # and the writes in one pipeline; the COMMIT (it was 10 round trips).
        ({"employer": "mill"}, [0, 2], 4),
        # By name alone: the employers of that name, then the earlier vote, the receipts.
        ({}, [0, 0, 1, 1], 6),
    ],
    ids=["by-slug", "by-name"],
)
def test_an_employer_vote_sends_its_writes_with_the_commit(proxied, named, votes_read, trips):
    """Issue 36: the vote, its receipt in the outbox, its location's counts and revision and
    its employer's counts go to PostgreSQL in one round trip with the BEGIN, after the
    reads that come first (no transaction), and the COMMIT after them."""
    body = {key: value for key, value in EMPLOYER_VOTE.items() if key != "employer"} | named
    with proxied() as (counter, client):
        mill = make_listing(
            "employer", db.session.query(Location).filter_by(slug="harbour").one(), "mill"
        )
        db.session.commit()
        counter.count = 0
        with statements_run() as run:
            response = client.post("/locations/harbour/votes/submit/employer", json=body)
        sent = counter.count
        assert response.status_code == 201, response.get_json()
        db.session.expire_all()
        stored = db.session.get(Vote, response.get_json()["id"])
        counts = db.session.get(VoteRevision, mill.location_id)
        pending = db.session.get(Listing, mill.id).pending_votes
        receipts = db.session.scalars(select(OutboxMessage.recipients)).all()

    assert (stored.employer_id, stored.active, stored.your_email) == (
        mill.id,
        False,
        "ann.voter@example.com",
    )
    assert (counts.pending, pending) == (1, 1)
    assert receipts == [["ann.voter@example.com"]]
    statements = [executed.sql for executed in run]
    reads = [sql for sql in statements if sql.startswith("SELECT")]
    assert [sql.split()[0] for sql in statements if sql not in reads] == [
        "INSERT",  # the receipt, in the outbox
        "INSERT",  # the vote
        "INSERT",  # the location's counts and revision (an upsert)
        "UPDATE",  # the employer's counts
    ]
    assert [sql.count("FROM votes") for sql in reads] == votes_read
    assert sent == trips


@needs_postgresql
def test_a_vote_s_values_reach_postgresql_as_parameters_never_in_its_sql(app_factory):
    """Held writes go as they were to be executed (platform/with_commit.py): a statement
    that fails is logged by PostgreSQL with `$1`, never with a voter's address."""
    sent = SentToPostgreSQL()
    url = make_url(PG_URL)
    with tcp_proxy(url.host or "127.0.0.1", url.port or 5432, watch_requests=sent.watcher) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port, query={"sslmode": "disable"})
        app = app_factory(SQLALCHEMY_DATABASE_URI=proxied.render_as_string(False))
        with app.app_context():
            make_listing("employer", make_location("harbour"), "mill")
            db.session.commit()
            response = app.test_client().post(
                "/locations/harbour/votes/submit/employer", json=EMPLOYER_VOTE
            )
    assert response.status_code == 201, response.get_json()
    sql = b"".join(sent.of_type("P", "Q"))  # Parse (extended protocol) and simple queries
    values = b"".join(sent.of_type("B"))  # Bind: the parameters
    assert b"INSERT INTO votes" in sql
    for personal in (b"ann.voter@example.com", b"Ann Voter", b"7946 0018", b"Fair pay."):
        assert personal not in sql
        assert personal in values
