"""Conditional GET (API.md 12): ETags, 304s and who may cache what, as a client sees them."""

import hashlib
from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import update

from directory_api.models import Listing, utcnow
from directory_api.platform import caching, recent
from directory_api.platform.extensions import db
from directory_api.platform.recent import RecentlyUsed

from .conftest import PG_URL, assert_problem, forget_answers, signed_in, statements_run
from .factories import (
    make_category,
    make_listing,
    make_location,
    make_region,
    make_social,
    make_user,
    make_vote,
)


@pytest.fixture
def regions(app):
    make_region("north")
    make_region("south")


def test_a_public_read_carries_an_etag_and_may_be_cached_by_anyone(client, regions):
    response = client.get("/regions/")
    assert response.status_code == 200
    etag = response.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"')  # strong
    assert response.headers["Cache-Control"] == "public, max-age=30"
    assert "Cookie" in response.headers["Vary"]


def test_a_matching_etag_is_a_304_without_a_body(client, regions):
    etag = client.get("/regions/").headers["ETag"]
    again = client.get("/regions/", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.data == b""
    assert again.headers["ETag"] == etag
    # A list of tags, a weak form of it and * match too.
    for header in (f'"other", {etag}', f"W/{etag}", "*"):
        assert client.get("/regions/", headers={"If-None-Match": header}).status_code == 304


def test_only_if_none_match_makes_a_304(client, regions):
    """Ranges are not served, so a Range with a matching If-Range gets the whole body, as
    do If-Modified-Since (no Last-Modified) and If-Match alone."""
    first = client.get("/regions/")
    etag = first.headers["ETag"]
    for headers in (
        {"Range": "bytes=0-9", "If-Range": etag},
        {"If-Modified-Since": "Tue, 24 Nov 2099 00:00:00 GMT"},
        {"If-Match": etag},
    ):
        again = client.get("/regions/", headers=headers)
        assert (again.status_code, again.data, again.headers["ETag"]) == (200, first.data, etag)
    # If-Match beside a matching If-None-Match: still the 304 (not a 412).
    both = client.get("/regions/", headers={"If-None-Match": etag, "If-Match": etag})
    assert (both.status_code, both.data) == (304, b"")


def test_a_change_changes_the_etag(app, client, regions):
    etag = client.get("/regions/").headers["ETag"]
    make_region("east")
    changed = client.get("/regions/", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    assert len(changed.get_json()["items"]) == 3


def test_the_same_resource_in_another_shape_has_another_etag(client, regions):
    first = client.get("/regions/?perPage=1").headers["ETag"]
    assert client.get("/regions/?perPage=2").headers["ETag"] != first


def test_signed_in_answers_are_never_stored_but_revalidate(app, regions):
    user = make_user("plain@example.com")
    client = signed_in(app, user.email)
    response = client.get("/me/")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "no-store"
    assert "Cookie" in response.headers["Vary"]
    again = client.get("/me/", headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304 and again.data == b""
    # A public read asked with a session is no-store too: its answer may differ per user.
    assert client.get("/regions/").headers["Cache-Control"] == "no-store"


def test_health_is_never_cached(client):
    response = client.get("/health")
    assert response.status_code == 200 and "ETag" in response.headers
    assert "public" not in response.headers.get("Cache-Control", "")


def test_only_successful_reads_get_an_etag(client, regions):
    missing = client.get("/regions/slug/nowhere")
    assert_problem(missing, 404)
    assert "ETag" not in missing.headers and "public" not in missing.headers.get(
        "Cache-Control", ""
    )
    refused = client.post("/regions/", json={"name": "West"})
    assert_problem(refused, 401)
    assert "ETag" not in refused.headers
    assert "Cookie" in refused.headers["Vary"]  # every answer varies on who asks


def test_a_stale_tag_on_a_write_changes_nothing(app, regions):
    client = signed_in(app, make_user("super@example.com", is_super=True).email)
    etag = client.get("/regions/").headers["ETag"]
    created = client.post("/regions/", json={"name": "West"}, headers={"If-None-Match": etag})
    assert created.status_code == 201


def test_the_public_lifetime_is_a_setting(app_factory):
    app = app_factory(PUBLIC_MAX_AGE=300)
    with app.app_context():
        make_region("north")
        response = app.test_client().get("/regions/")
    assert response.headers["Cache-Control"] == "public, max-age=300"


def test_cors_lets_a_browser_read_the_etag(app_factory):
    app = app_factory(CORS_ORIGINS=["https://app.example"])
    with app.app_context():
        response = app.test_client().get("/regions/", headers={"Origin": "https://app.example"})
    exposed = {h.strip() for h in response.headers["Access-Control-Expose-Headers"].split(",")}
    assert "ETag" in exposed


# --- list and search pages: revalidated before their work (issue 19) --------------------------

PAGE = "/locations/harbour/businesses/?perPage=10"
SEARCH = "/locations/harbour/businesses/search/bakery"


@pytest.fixture
def listed(world):
    food = make_category("food")
    cafes = make_category("cafes", parent=food)
    instagram, facebook = make_social("instagram"), make_social("facebook")
    for slug in ("bakery", "bakery-annex", "mill"):
        make_listing(
            "business",
            world["harbour"],
            slug,
            subcategory=cafes,
            socials=[(instagram, f"https://i.example/{slug}")],
        )
    return {"cafes": cafes, "instagram": instagram, "facebook": facebook}


def body_hash(response) -> str:
    """Werkzeug's ETag: the body's SHA-1 (an identifier, not a protection)."""
    return f'"{hashlib.sha1(response.data, usedforsecurity=False).hexdigest()}"'


def statements_of(app, call) -> tuple[object, list[str]]:
    with app.app_context(), statements_run() as run:
        return call(), [executed.sql for executed in run]


def page_read(statements: list[str]) -> bool:
    """Whether the page's work was done: a statement read its listings (a first page may
    find its location in that same statement, so their number does not tell)."""
    return any("FROM listings" in sql for sql in statements)


def answered_early(statements: list[str]) -> bool:
    """The location with its list's revision, alone: the answer came before the work."""
    return len(statements) == 1 and not page_read(statements)


@pytest.mark.parametrize("path", [PAGE, SEARCH])
def test_a_revalidated_page_is_answered_before_its_work(app, clients, listed, path):
    client = clients["anonymous"]
    page, work = statements_of(app, lambda: client.get(path))
    etag = page.headers["ETag"]
    assert etag == body_hash(page)  # the body's hash, as ever

    again, revalidation = statements_of(
        app, lambda: client.get(path, headers={"If-None-Match": etag})
    )

    assert again.status_code == 304 and again.data == b""
    assert again.headers["ETag"] == etag
    assert again.headers["Cache-Control"] == "public, max-age=30"
    assert "Cookie" in again.headers["Vary"]
    assert answered_early(revalidation) and page_read(work)


def test_a_first_page_found_with_its_location_is_the_page_found_after_it(app, clients, listed):
    """A first page no answer kept could serve finds its location in its own statement;
    one asked with a tag (a 304 might come first) finds the location first. Same answer."""
    client = clients["anonymous"]
    one, together = statements_of(app, lambda: client.get(PAGE))
    forget_answers()
    two, apart = statements_of(app, lambda: client.get(PAGE, headers={"If-None-Match": '"x"'}))

    # On SQLite (no round trip to save) the location comes first all the same.
    assert len(together) == (1 if PG_URL else 2) and page_read(together)
    assert len(apart) == 2 and answered_early(apart[:1])
    padded, alone = statements_of(app, lambda: client.get(PAGE + "&page=001"))
    assert len(alone) == len(together) and padded.get_json()["items"] == one.get_json()["items"]
    assert one.status_code == two.status_code == 200
    assert one.data == two.data
    for name in ("ETag", "Link", "Content-Type", "Cache-Control"):
        assert one.headers[name] == two.headers[name]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/locations/nowhere/businesses/", 404),
        ("/locations/nowhere/businesses/?perPage=0", 404),  # the path first, as ever
        ("/locations/harbour/businesses/?perPage=0", 422),
        ("/locations/harbour/businesses/?perPage=1&perPage=2", 422),
    ],
)
def test_a_first_page_finding_its_location_late_answers_problems_in_order(clients, path, status):
    assert_problem(clients["anonymous"].get(path), status)


@pytest.mark.skipif(not PG_URL, reason="SQLite reads the location first (CI's PostgreSQL pass)")
def test_an_empty_first_page_is_not_kept_under_a_revision_it_was_not_read_under(
    app, clients, monkeypatch
):
    """An empty first page finds its location after its rows, in another snapshot: a
    listing added between the two must not leave that empty page kept as the new
    revision's (review of issue 36)."""
    from sqlalchemy.orm import Session

    from directory_api.api import listings as views
    from directory_api.models import Business

    location = make_location("quiet")
    path = "/locations/quiet/businesses/"
    real = views.paginate

    def added_meanwhile(*args, **kwargs):
        page = real(*args, **kwargs)
        with Session(db.engine) as other:
            other.add(Business(location_id=location.id, slug="new", name="New Shop"))
            other.commit()
        return page

    monkeypatch.setattr(views, "paginate", added_meanwhile)
    raced = clients["anonymous"].get(path)
    monkeypatch.undo()
    assert raced.get_json()["items"] == []  # what that request saw

    again = clients["anonymous"].get(path)
    assert [item["slug"] for item in again.get_json()["items"]] == ["new"]
    assert again.headers["ETag"] != raced.headers["ETag"]


def rename_listing(clients, listed):
    return clients["owner"].put(URL, json={"slug": "bakery", "name": "Bakery Two"})


def relink_listing(clients, listed):
    links = [{"social": "facebook", "url": "https://f.example/bakery"}]
    return clients["owner"].put(URL, json={"slug": "bakery", "socials": links})


def add_listing(clients, listed):
    return clients["owner"].post(URL, json={"name": "Bakery Three"})


def delete_listing(clients, listed):
    return clients["owner"].delete(URL, json={"slug": "bakery-annex"})


def rename_category(clients, listed):
    return clients["super"].put(
        "/categories/", json={"id": str(listed["cafes"].id), "slug": "coffee"}
    )


def rename_social(clients, listed):
    return clients["super"].put(
        "/socials/", json={"id": str(listed["instagram"].id), "slug": "insta"}
    )


URL = "/locations/harbour/businesses/"


@pytest.mark.parametrize(
    "change",
    [rename_listing, relink_listing, add_listing, delete_listing, rename_category, rename_social],
)
@pytest.mark.parametrize("path", [PAGE, SEARCH])
def test_whatever_a_page_shows_changes_its_tag(clients, listed, change, path):
    client = clients["anonymous"]
    before = client.get(path)
    assert client.get(path, headers={"If-None-Match": before.headers["ETag"]}).status_code == 304

    assert change(clients, listed).status_code in (200, 201, 204)

    after = client.get(path, headers={"If-None-Match": before.headers["ETag"]})
    assert after.status_code == 200
    assert after.get_json() != before.get_json()
    assert after.headers["ETag"] == body_hash(after)
    assert client.get(path, headers={"If-None-Match": after.headers["ETag"]}).status_code == 304


@pytest.mark.parametrize("path", [PAGE, SEARCH])
def test_a_change_no_page_shows_keeps_its_tag(clients, listed, path):
    """Revisions turn for what the pages' output reads, not for every write: a location's
    e-mail, a new social and a new category are on no listing's page."""
    client = clients["anonymous"]
    before = client.get(path)
    response = clients["owner"].put(
        "/locations/slug/harbour", json={"email": "new@harbour.example"}
    )
    assert response.status_code == 200
    assert clients["super"].post("/socials/", json={"name": "Mastodon"}).status_code == 201
    assert clients["super"].post("/categories/", json={"name": "Bakeries"}).status_code == 201

    again = client.get(path, headers={"If-None-Match": before.headers["ETag"]})
    assert again.status_code == 304


def test_the_pages_revisions_follow_every_table_their_output_reads():
    """What turns a page's revision is derived from its output statement: a table joined
    into the output is followed with nothing more to write (a row of it, changed, turns
    every revision; a row naming a listing turns that listing's)."""
    from sqlalchemy import select

    from directory_api.listing_pages import OUTPUT, SHOWN, listing_keys
    from directory_api.models import Location
    from directory_api.platform.sql import tables_read

    names = {table.name: key for table, key in listing_keys(SHOWN).items()}
    assert names == {
        "listings": "id",
        "listing_socials": "listing_id",
        "categories": None,
        "socials": None,
    }
    listings, locations = Listing.__table__, Location.__table__
    wider = OUTPUT.add_columns(locations.c.name).join_from(
        listings, locations, listings.c.location_id == locations.c.id
    )
    with_location = {table.name: key for table, key in listing_keys(tables_read(wider)).items()}
    assert with_location == {**names, "locations": None}
    assert tables_read(select(locations.c.id)) == {locations}


@pytest.mark.parametrize("path", [PAGE, SEARCH])
def test_a_page_asked_again_is_answered_before_its_work(app, clients, listed, path):
    """By anyone: the answer is the same for all, the headers of who asks their own."""
    anonymous, owner = clients["anonymous"], clients["owner"]
    first, work = statements_of(app, lambda: anonymous.get(path))

    for client, cache_control in ((anonymous, "public, max-age=30"), (owner, "no-store")):
        again, statements = statements_of(app, lambda c=client: c.get(path))
        assert answered_early(statements) and page_read(work)
        assert (again.status_code, again.data) == (200, first.data)
        for name in ("Content-Type", "Content-Length", "Link", "ETag"):
            assert again.headers[name] == first.headers[name]
        assert again.headers["Cache-Control"] == cache_control
        assert "Cookie" in again.headers["Vary"]
        assert again.headers["X-Request-ID"] != first.headers["X-Request-ID"]
    head = anonymous.head(path)
    assert (head.status_code, head.data, head.headers["ETag"]) == (200, b"", first.headers["ETag"])


def test_an_answer_too_large_to_keep_is_worked_out_again(app, clients, listed, monkeypatch):
    monkeypatch.setattr(caching, "ANSWER_BYTES_KEPT", 100)
    client = clients["anonymous"]
    first, work = statements_of(app, lambda: client.get(PAGE))

    again, statements = statements_of(app, lambda: client.get(PAGE))

    assert again.data == first.data and page_read(statements) and page_read(work)
    # Its tag is kept all the same: a revalidation is still one statement.
    tag = {"If-None-Match": first.headers["ETag"]}
    revalidated, revalidation = statements_of(app, lambda: client.get(PAGE, headers=tag))
    assert revalidated.status_code == 304 and answered_early(revalidation)


def test_the_link_header_counts_toward_the_size_kept(app, clients, listed, monkeypatch):
    """It repeats the URL, which the client chose: it may not make a kept answer larger."""
    client = clients["anonymous"]
    first = client.get(PAGE)
    size = len(first.data) + len(first.headers["Link"]) + len(first.headers["Content-Type"])
    for limit, kept in ((size - 1, False), (size, True)):
        forget_answers()
        monkeypatch.setattr(caching, "ANSWER_BYTES_KEPT", limit)
        work = statements_of(app, lambda: client.get(PAGE))[1]
        again = statements_of(app, lambda: client.get(PAGE))[1]
        assert answered_early(again) is kept and page_read(work)


def test_kept_answers_are_bounded(app, clients, listed, monkeypatch):
    monkeypatch.setattr(caching, "KNOWN_ANSWERS", RecentlyUsed(size=2))
    client = clients["anonymous"]
    pages = [f"{PAGE}&page={number}" for number in (1, 2, 3)]
    work = {page: statements_of(app, lambda p=page: client.get(p))[1] for page in pages}

    # The two most recent are kept; the first was let go and is worked out again.
    again = [statements_of(app, lambda p=page: client.get(p))[1] for page in reversed(pages)]
    assert [answered_early(statements) for statements in again] == [True, True, False]
    assert all(page_read(statements) for statements in work.values())


def test_a_page_another_process_answered_still_revalidates(clients, listed):
    """What is kept is per process: one that has not answered the page does the work."""
    client = clients["anonymous"]
    etag = client.get(PAGE).headers["ETag"]
    forget_answers()
    assert client.get(PAGE, headers={"If-None-Match": etag}).status_code == 304


def test_kept_tags_are_bounded(app):
    tags = RecentlyUsed(size=3)
    for number in range(5):
        tags.put(bytes([number]), f'"{number}"')
    assert list(tags.entries) == [bytes([2]), bytes([3]), bytes([4])]
    with app.app_context():
        assert tags.get(bytes([0])) is None
        assert tags.get(bytes([2])) == '"2"'


def test_a_change_made_around_the_app_is_seen_within_the_public_lifetime(
    app, clients, listed, monkeypatch
):
    """SQL by hand (or an older release's worker) does not turn the revision: what the
    process remembers lives as long as a public cache may keep the page (PUBLIC_MAX_AGE)."""
    client = clients["anonymous"]
    first = client.get(PAGE)
    tag = first.headers["ETag"]
    with app.app_context():
        db.session.execute(
            update(Listing).where(Listing.slug == "bakery").values(name="Renamed by hand")
        )
        db.session.commit()
    assert client.get(PAGE, headers={"If-None-Match": tag}).status_code == 304
    assert client.get(PAGE).data == first.data  # the kept answer, for as long
    now = recent.monotonic()
    monkeypatch.setattr(recent, "monotonic", lambda: now + 30)

    fresh = client.get(PAGE, headers={"If-None-Match": tag})

    assert fresh.status_code == 200
    assert "Renamed by hand" in {item["name"] for item in fresh.get_json()["items"]}
    assert client.get(PAGE).data == fresh.data


# --- exports: streamed, so tagged by their revision and URL (issue 28) ------------------------

EXPORT = "/locations/harbour/businesses/export.csv"


def test_a_revalidated_export_is_answered_before_its_work(app, clients, listed):
    client = clients["anonymous"]
    export, work = statements_of(app, lambda: client.get(EXPORT))
    etag = export.headers["ETag"]
    assert export.status_code == 200 and etag.startswith('"')
    assert export.headers["Cache-Control"] == "public, max-age=30"
    assert export.data.count(b"\r\n") == 4  # the header and three rows

    again, revalidation = statements_of(
        app, lambda: client.get(EXPORT, headers={"If-None-Match": etag})
    )

    assert (again.status_code, again.data, again.headers["ETag"]) == (304, b"", etag)
    assert again.headers["Cache-Control"] == "public, max-age=30"
    assert answered_early(revalidation) and page_read(work)  # the list's revision; no row
    assert "X-RateLimit-Remaining" not in again.headers  # it spends no allowance
    # Any process knows the tag: it is not remembered, it is what determines the export.
    forget_answers()
    assert client.get(EXPORT, headers={"If-None-Match": f'"x", W/{etag}'}).status_code == 304
    # So does one that exports now, and gives the same tag for the same rows.
    assert client.get(EXPORT).headers["ETag"] == etag


def test_an_export_changed_behind_the_app_s_back_is_seen_within_public_max_age(
    app, clients, listed, monkeypatch
):
    """As for pages (recent.py): a change that bypasses the app turns no revision, so an
    export's tag lasts one PUBLIC_MAX_AGE stretch, not for ever."""
    client = clients["anonymous"]
    monkeypatch.setattr(caching, "period", lambda: 1)
    etag = client.get(EXPORT).headers["ETag"]
    db.session.execute(update(Listing).where(Listing.slug == "mill").values(name="Renamed"))
    db.session.commit()
    assert client.get(EXPORT, headers={"If-None-Match": etag}).status_code == 304  # this stretch

    monkeypatch.setattr(caching, "period", lambda: 2)  # PUBLIC_MAX_AGE seconds later
    fresh = client.get(EXPORT, headers={"If-None-Match": etag})
    assert fresh.status_code == 200 and b"Renamed" in fresh.data
    assert fresh.headers["ETag"] != etag


def test_a_revalidated_export_needs_no_free_slot(app_factory):
    app = app_factory(EXPORTS_AT_ONCE=1)
    with app.app_context():
        location = make_location("harbour")
        make_listing("business", location, "mill")
        client = app.test_client()
        etag = client.get(EXPORT).headers["ETag"]
        held = client.get(EXPORT, buffered=False)  # streaming, in the only slot
        assert client.get(EXPORT).status_code == 429
        assert client.get(EXPORT, headers={"If-None-Match": etag}).status_code == 304
        held.close()


@pytest.mark.parametrize(
    "change",
    [rename_listing, relink_listing, add_listing, delete_listing, rename_category, rename_social],
)
def test_whatever_an_export_shows_changes_its_tag(clients, listed, change):
    client = clients["anonymous"]
    before = client.get(EXPORT)

    assert change(clients, listed).status_code in (200, 201, 204)

    after = client.get(EXPORT, headers={"If-None-Match": before.headers["ETag"]})
    assert after.status_code == 200
    assert after.data != before.data
    assert client.get(EXPORT, headers={"If-None-Match": after.headers["ETag"]}).status_code == 304


def test_another_export_has_another_tag(clients, listed):
    client = clients["anonymous"]
    tags = {
        client.get(path).headers["ETag"]
        for path in (
            EXPORT,
            EXPORT + "?sort=-name",
            EXPORT + "?subcategory=cafes",
            "/locations/harbour/employers/export.csv",
            "/locations/hill/businesses/export.csv",
        )
    }
    assert len(tags) == 5
    assert client.get(EXPORT + "?sort=-name").headers["ETag"] in tags  # the same, the same


def test_a_signed_in_export_is_never_stored_but_revalidates(clients, listed):
    owner = clients["owner"]
    export = owner.get(EXPORT)
    assert export.headers["Cache-Control"] == "no-store"
    again = owner.get(EXPORT, headers={"If-None-Match": export.headers["ETag"]})
    assert (again.status_code, again.data, again.headers["Cache-Control"]) == (304, b"", "no-store")


def test_any_tag_matches_an_export_but_not_a_refused_one(clients, listed):
    client = clients["anonymous"]
    etag = client.get(EXPORT).headers["ETag"]
    anything = client.get(EXPORT, headers={"If-None-Match": "*"})
    assert (anything.status_code, anything.data, anything.headers["ETag"]) == (304, b"", etag)
    assert_problem(client.get(EXPORT + "?page=2", headers={"If-None-Match": "*"}), 422)


VOTES_EXPORT = "/locations/harbour/votes/export.csv"


@pytest.fixture
def voted(listed, world):
    """An employer at harbour with a vote for it, one unlinked vote, and a vote at hill."""
    works = make_listing("employer", world["harbour"], "works", name="Harbour Works")
    linked = make_vote(world["harbour"], employer=works, your_email="val@example.com")
    make_vote(world["harbour"], business_name="Nobody", your_email="una@example.com")
    make_vote(world["hill"], your_email="hal@example.com")
    return {"works": works, "linked": linked}


def test_a_revalidated_votes_export_is_answered_before_its_work(app, clients, voted):
    owner = clients["owner"]
    export, work = statements_of(app, lambda: owner.get(VOTES_EXPORT))
    etag = export.headers["ETag"]
    assert export.status_code == 200 and export.data.count(b"\r\n") == 3
    assert export.headers["Cache-Control"] == "no-store"  # staff fields: never stored

    again, revalidation = statements_of(
        app, lambda: owner.get(VOTES_EXPORT, headers={"If-None-Match": etag})
    )
    assert (again.status_code, again.data, again.headers["ETag"]) == (304, b"", etag)
    assert len(revalidation) < len(work)
    assert clients["admin"].get(VOTES_EXPORT, headers={"If-None-Match": etag}).status_code == 304
    # The tag opens nothing: access is checked first.
    assert_problem(clients["anonymous"].get(VOTES_EXPORT, headers={"If-None-Match": etag}), 401)
    refused = clients["other_owner"].get(VOTES_EXPORT, headers={"If-None-Match": etag})
    assert_problem(refused, 403)
    assert owner.get(VOTES_EXPORT + "?active=false").headers["ETag"] != etag  # another URL
    assert owner.get("/locations/hill/votes/export.csv").status_code == 403


def submit_vote(clients, voted):
    body = {
        "yourName": "New Voter",
        "yourEmail": "new@example.com",
        "yourPhone": "+44 20 7946 0000",
        "businessName": "Harbour Works",
        "businessBranch": "Quay",
        "voteBody": "Fine.",
        "yourPosition": "Clerk",
    }
    return clients["anonymous"].post("/locations/harbour/votes/submit/employer", json=body)


def moderate_vote(clients, voted):
    return clients["admin"].put(
        "/locations/harbour/votes/", json={"id": str(voted["linked"].id), "active": True}
    )


def delete_vote(clients, voted):
    return clients["owner"].delete(
        "/locations/harbour/votes/", json={"id": str(voted["linked"].id)}
    )


def rename_employer(clients, voted):
    target = {"id": str(voted["works"].id), "slug": "harbour-works"}
    return clients["owner"].put("/locations/harbour/employers/", json=target)


def redact_by_retention(clients, voted):
    from directory_api.privacy import run_retention

    with clients.app.app_context():
        report = run_retention(now=utcnow() + timedelta(days=400))
    assert report.votes_redacted == 3
    return SimpleNamespace(status_code=200)


def erase_a_voter(clients, voted):
    from directory_api.privacy import erase

    with clients.app.app_context():
        assert erase("una@example.com") == {"votes": 1, "messages": 0}
    return SimpleNamespace(status_code=200)


@pytest.mark.parametrize(
    "change",
    [submit_vote, moderate_vote, delete_vote, rename_employer, redact_by_retention, erase_a_voter],
)
def test_whatever_the_votes_export_shows_changes_its_tag(clients, voted, change):
    owner = clients["owner"]
    before = owner.get(VOTES_EXPORT)
    other_place = clients["other_owner"].get("/locations/hill/votes/export.csv").headers["ETag"]

    assert change(clients, voted).status_code in (200, 201, 204)

    after = owner.get(VOTES_EXPORT, headers={"If-None-Match": before.headers["ETag"]})
    assert after.status_code == 200
    assert after.data != before.data
    assert (
        owner.get(VOTES_EXPORT, headers={"If-None-Match": after.headers["ETag"]}).status_code == 304
    )
    if change is not redact_by_retention:  # retention redacts the votes of every place
        hill = clients["other_owner"].get(
            "/locations/hill/votes/export.csv", headers={"If-None-Match": other_place}
        )
        assert hill.status_code == 304  # another location's export is untouched
