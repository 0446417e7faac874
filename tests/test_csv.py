"""CSV export (API.md 11): every matching row as the JSON list shows it, streamed, safe to
open in a spreadsheet."""

import csv
import io

import pytest

from directory_api.models import Role
from directory_api.platform import csv_export
from directory_api.platform.extensions import db

from .conftest import assert_problem, signed_in, statements_run
from .factories import (
    build_listing,
    grant,
    make_category,
    make_listing,
    make_location,
    make_social,
    make_user,
    make_vote,
)

BUSINESSES = "/locations/harbour/businesses/"


def parse(response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))


def as_cells(item: dict) -> dict[str, str]:
    """A JSON list item as its CSV row should read."""
    cells = {}
    for name, value in item.items():
        if value is None:
            cells[name] = ""
        elif isinstance(value, list):
            cells[name] = " ".join(f"{link['social']}:{link['url']}" for link in value)
        else:
            cells[name] = str(value)
    return cells


@pytest.fixture
def harbour(app):
    location = make_location("harbour")
    food = make_category("food")
    cafes, bars = make_category("cafes", parent=food), make_category("bars", parent=food)
    instagram = make_social("instagram")
    db.session.add_all(
        build_listing(
            "business",
            location,
            f"b-{number:03}",
            name=f"Place {number:03}",
            subcategory=cafes if number % 2 else bars,
            socials=[(instagram, f"https://instagram.com/b{number}")] if number % 3 else [],
        )
        for number in range(130)
    )
    db.session.commit()  # one commit for the lot: most tests here start from it
    make_listing("business", make_location("hill"), "elsewhere")
    return location


def test_a_listing_export_is_every_row_of_the_list_as_json_shows_it(client, harbour):
    response = client.get(BUSINESSES + "export.csv")
    rows = parse(response)
    assert (
        response.headers["Content-Disposition"] == 'attachment; filename="harbour-businesses.csv"'
    )
    assert len(rows) == 130  # every row, not a page; not another location's
    listed = []
    for page in (1, 2):
        listed += client.get(BUSINESSES + f"?perPage=100&page={page}").get_json()["items"]
    assert rows == [as_cells(item) for item in listed]
    assert list(rows[0]) == list(listed[0])  # the JSON field names, in the same order


def test_the_list_filters_and_sort_apply(client, harbour):
    rows = parse(client.get(BUSINESSES + "export.csv?subcategory=cafes&sort=-name"))
    assert len(rows) == 65
    assert {row["subcategory"] for row in rows} == {"cafes"}
    assert [row["name"] for row in rows] == sorted((row["name"] for row in rows), reverse=True)


def test_paging_parameters_are_refused(client, harbour):
    problem = assert_problem(client.get(BUSINESSES + "export.csv?page=2"), 422)
    assert "page" in problem["errors"]


def test_cells_a_spreadsheet_would_run_are_defused(client, app):
    location = make_location("harbour")
    make_listing(
        "business",
        location,
        "evil",
        name='=HYPERLINK("https://evil.example")',
        phone="+44 20 7946 0000",
        description="@SUM(A1) and -1",
        branch="Plain",
    )
    (row,) = parse(client.get(BUSINESSES + "export.csv"))
    assert row["name"] == '\'=HYPERLINK("https://evil.example")'
    assert row["phone"] == "'+44 20 7946 0000"
    assert row["description"] == "'@SUM(A1) and -1"
    assert row["branch"] == "Plain"


def test_an_empty_export_is_its_header(client, app):
    make_location("harbour")
    response = client.get("/locations/harbour/employers/export.csv")
    assert response.status_code == 200
    assert response.get_data(as_text=True).startswith("id,createdAt,updatedAt,slug,name,")
    assert parse(response) == []


def test_an_unknown_location_is_404(client, app):
    assert_problem(client.get("/locations/nowhere/businesses/export.csv"), 404)


def test_the_votes_export_is_the_staff_view_of_every_vote(app, client):
    location = make_location("harbour")
    owner = make_user("owner@example.com")
    grant(owner, location, Role.OWNER)
    make_vote(location, active=True, your_email="one@example.org")
    make_vote(location, active=False, your_email="two@example.org")
    staff = signed_in(app, owner.email)
    rows = parse(staff.get("/locations/harbour/votes/export.csv"))
    assert sorted(row["yourEmail"] for row in rows) == ["one@example.org", "two@example.org"]
    assert {"confirmed", "duplicateOf", "redacted"} <= set(rows[0])
    narrowed = parse(staff.get("/locations/harbour/votes/export.csv?active=false"))
    assert [row["yourEmail"] for row in narrowed] == ["two@example.org"]
    # Newest first, as the list.
    listed = staff.get("/locations/harbour/votes/").get_json()["items"]
    assert [row["id"] for row in rows] == [item["id"] for item in listed]


# --- import ----------------------------------------------------------------------------------


@pytest.fixture
def owner(app, harbour):
    user = make_user("owner@example.com")
    grant(user, harbour, Role.OWNER)
    return signed_in(app, user.email)


WRITES = ("INSERT", "UPDATE", "DELETE")


def import_csv(client, text: str, query: str = "", kind: str = "businesses"):
    return client.post(
        f"/locations/harbour/{kind}/import{query}", data=text.encode(), content_type="text/csv"
    )


def test_an_export_imports_unchanged(client, owner):
    """And writes nothing: no row, no social link replaced by its copy, no audit entry."""
    exported = client.get(BUSINESSES + "export.csv").get_data(as_text=True)
    assert any(row["socials"] for row in csv.DictReader(io.StringIO(exported)))
    etag = client.get(BUSINESSES).headers["ETag"]
    with statements_run() as run:
        response = import_csv(owner, exported)
    assert response.status_code == 200, response.get_json()
    assert response.get_json() == {"created": 0, "updated": 0, "unchanged": 130, "dryRun": False}
    writes = [s.sql for s in run if s.sql.lstrip().upper().startswith(WRITES)]
    assert writes == []
    assert client.get(BUSINESSES + "export.csv").get_data(as_text=True) == exported
    assert client.get(BUSINESSES).headers["ETag"] == etag


def test_rows_update_by_slug_and_create_the_rest(client, owner):
    text = (
        "slug,name,subcategory,socials\r\n"
        "b-001,Renamed One,cafes,\r\n"  # an empty cell clears the socials
        ",Brand New,bars,instagram:https://instagram.com/new\r\n"
        "fresh-start,Fresh Start,,\r\n"
    )
    response = import_csv(owner, text)
    assert response.status_code == 200, response.get_json()
    assert response.get_json() == {"created": 2, "updated": 1, "unchanged": 0, "dryRun": False}
    renamed = client.get(BUSINESSES + "slug/b-001").get_json()
    assert renamed["name"] == "Renamed One" and renamed["socials"] == []
    assert renamed["description"] is None  # a column left out stays as it was (none)
    new = client.get(BUSINESSES + "slug/brand-new").get_json()
    assert new["subcategory"] == "bars"
    assert new["socials"] == [{"social": "instagram", "url": "https://instagram.com/new"}]
    assert client.get(BUSINESSES + "slug/fresh-start").status_code == 200
    assert client.get(BUSINESSES).get_json()["total"] == 132


def test_new_rows_of_one_name_are_numbered_and_counted_once(client, owner, harbour):
    """An import's new rows choose their slugs against one set (not a query and a flush
    each): names that slugify alike are numbered past what the location has and what the
    rows before took; the list's stored total and its ETag move by all of them."""
    make_listing("business", harbour, "place-001", name="Place 001")
    before = client.get(BUSINESSES)
    assert before.get_json()["total"] == 131
    text = "slug,name\n,Place 001\n,Place 001\nplace-001-9,Chosen\n,Place  001!\n"
    response = import_csv(owner, text)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["created"] == 4
    after = client.get(BUSINESSES + "?sort=-createdAt&perPage=100")
    assert after.get_json()["total"] == 135
    assert after.headers["ETag"] != before.headers["ETag"]
    slugs = {item["slug"] for item in after.get_json()["items"]}
    assert {"place-001-2", "place-001-3", "place-001-9", "place-001-4"} <= slugs


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_row_s_own_slug_wins_wherever_it_stands(client, owner, dry_run):
    """A new row's explicit slug is its own even below a row whose name would derive it
    (the import answered 409 before); the dry run answers as the import does."""
    text = "slug,name\n,Foo\nfoo,Bar\n"
    response = import_csv(owner, text, "?dryRun=true" if dry_run else "")
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["created"] == 2
    if not dry_run:
        assert client.get(BUSINESSES + "slug/foo").get_json()["name"] == "Bar"
        assert client.get(BUSINESSES + "slug/foo-2").get_json()["name"] == "Foo"


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_name_without_a_slug_in_it_is_named_by_its_row(client, owner, dry_run):
    """A name with nothing to make a slug of is the row's problem, named like the others
    (it was a 422 on `slug` with no row), in a dry run too; nothing is written."""
    before = client.get(BUSINESSES).get_json()["total"]
    response = import_csv(owner, "name\nFine Name\n!!!\n", "?dryRun=true" if dry_run else "")
    problem = assert_problem(response, 422)
    assert list(problem["errors"]) == ["row 2"]
    assert "slug" in problem["errors"]["row 2"]
    assert client.get(BUSINESSES).get_json()["total"] == before


def test_a_column_left_out_is_left_alone(client, owner):
    before = client.get(BUSINESSES + "slug/b-002").get_json()
    assert import_csv(owner, "slug,branch\nb-002,Quay\n").status_code == 200
    after = client.get(BUSINESSES + "slug/b-002").get_json()
    assert after == {**before, "branch": "Quay", "updatedAt": after["updatedAt"]}


def test_every_bad_row_is_named_and_nothing_is_written(client, owner):
    text = (
        "slug,name,subcategory,website\n"
        "b-001,Good Change,,\n"
        "b-002,,,\n"  # no name
        ",New Place,nowhere,\n"  # no such subcategory
        ",Other Place,,not a url\n"
        "b-001,Twice,,\n"  # the same listing twice
    )
    before = client.get(BUSINESSES + "export.csv").get_data()
    problem = assert_problem(import_csv(owner, text), 422)
    assert set(problem["errors"]) == {"row 2", "row 3", "row 4", "row 5"}
    assert "name" in problem["errors"]["row 2"]
    assert "subcategory" in problem["errors"]["row 3"]
    assert "website" in problem["errors"]["row 4"]
    assert "slug" in problem["errors"]["row 5"]
    assert client.get(BUSINESSES + "export.csv").get_data() == before


def test_a_row_s_report_lists_every_problem_at_once(client, owner):
    """An unknown subcategory and unknown socials beside a schema error of the same row:
    one report names them all, so a spreadsheet is fixed in one pass."""
    text = (
        "slug,name,subcategory,website,socials\n"
        ",New Place,nowhere,not a url,nosuch:https://n.example\n"
    )
    problem = assert_problem(import_csv(owner, text), 422)
    assert set(problem["errors"]["row 1"]) == {"subcategory", "website", "socials"}
    assert "nowhere" in problem["errors"]["row 1"]["subcategory"][0]


def test_a_dry_run_counts_and_writes_nothing(client, owner):
    before = client.get(BUSINESSES + "export.csv").get_data()
    response = import_csv(owner, "slug,name\nb-001,Changed\n,Added\n", "?dryRun=true")
    assert response.get_json() == {"created": 1, "updated": 1, "unchanged": 0, "dryRun": True}
    assert client.get(BUSINESSES + "export.csv").get_data() == before


@pytest.mark.parametrize("dry_run", [True, False])
def test_rows_that_change_nothing_are_counted_apart(client, owner, app, dry_run):
    """An export edited in 3 of its rows, imported back: 3 updated, the rest unchanged,
    and only those 3 are audit entries (issue 35: it answered "updated": 130)."""
    exported = client.get(BUSINESSES + "export.csv").get_data(as_text=True)
    rows = list(csv.reader(io.StringIO(exported)))
    name = rows[0].index("name")
    for number in (1, 2, 3):
        rows[number][name] = f"Edited {number}"
    edited_text = io.StringIO()
    csv.writer(edited_text).writerows(rows)
    with statements_run() as run:
        response = import_csv(owner, edited_text.getvalue(), f"?dryRun={str(dry_run).lower()}")
    assert response.status_code == 200, response.get_json()
    assert response.get_json() == {
        "created": 0,
        "updated": 3,
        "unchanged": len(rows) - 4,
        "dryRun": dry_run,
    }
    writes = [s for s in run if s.sql.lstrip().upper().startswith(("INSERT", "UPDATE"))]
    assert bool(writes) is not dry_run
    edited = client.get(BUSINESSES, query_string={"perPage": 100, "sort": "name"}).get_json()
    assert sum(item["name"].startswith("Edited") for item in edited["items"]) == (
        0 if dry_run else 3
    )


@pytest.mark.parametrize(
    "name", ["=Odd Name", "'=Quoted on purpose", "''=Twice", "'Plain quote", "-Minus", "'"]
)
def test_a_value_survives_an_export_and_an_import_exactly(client, owner, name):
    """Issue 35: a real value starting with `'=` lost its quote on the way back."""
    made = owner.post("/locations/harbour/businesses/", json={"name": name, "slug": "odd"})
    assert made.status_code == 201, made.get_json()
    exported = client.get(BUSINESSES + "export.csv").get_data(as_text=True)
    imported = import_csv(owner, exported)
    assert imported.status_code == 200, imported.get_json()
    assert imported.get_json()["updated"] == 0  # every row read back as it was
    assert client.get(BUSINESSES + "slug/odd").get_json()["name"] == name


def test_an_exported_formula_guard_is_taken_off(client, owner):
    assert import_csv(owner, "name,phone\n'=Odd Name,'+44 20 7946 0000\n").status_code == 200
    created = client.get(BUSINESSES + "slug/odd-name").get_json()
    assert created["name"] == "=Odd Name" and created["phone"] == "+44 20 7946 0000"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name,colour\nOne,red\n", "header"),
        ("name,name\nOne,Two\n", "header"),
        ("", "header"),
        ("name,branch\nOne\n", "row 1"),
    ],
)
def test_a_malformed_csv_is_422_naming_where(owner, text, field):
    assert field in assert_problem(import_csv(owner, text), 422)["errors"]


def test_only_csv_is_taken(owner):
    response = owner.post(BUSINESSES + "import", json=[{"name": "One"}])
    assert "text/csv" in assert_problem(response, 415)["detail"]
    bad = owner.post(BUSINESSES + "import", data=b"name\n\xff\n", content_type="text/csv")
    assert_problem(bad, 400)


def test_imports_have_size_limits(app_factory):
    app = app_factory(IMPORT_MAX_BYTES=1024)
    with app.app_context():
        location = make_location("harbour")
        user = make_user("owner@example.com")
        grant(user, location, Role.OWNER)
        client = signed_in(app, user.email)
        too_big = "name\n" + "A Place Name\n" * 100
        assert_problem(import_csv(client, too_big), 413)
        # A small import within the limit goes through.
        assert import_csv(client, "name\nOne Place\n").status_code == 200
    rows = "name\n" + "x\n" * 10_001
    app = app_factory()
    with app.app_context():
        location = make_location("hill")
        user = make_user("hill@example.com")
        grant(user, location, Role.OWNER)
        response = signed_in(app, user.email).post(
            "/locations/hill/businesses/import", data=rows, content_type="text/csv"
        )
        assert "10000" in assert_problem(response, 413)["detail"]


def test_an_export_hands_the_server_bytes(app, world):
    """WSGI servers (gunicorn, Werkzeug's) take bytes only; a streamed str broke the export
    under a real server while the test client took it (found by tests/test_readme.py)."""
    from werkzeug.test import EnvironBuilder, run_wsgi_app

    environ = EnvironBuilder(path="/locations/harbour/businesses/export.csv").get_environ()
    body, status, _ = run_wsgi_app(app.wsgi_app, environ)
    chunks = list(body)
    assert status.startswith("200")
    assert chunks and all(isinstance(chunk, bytes) for chunk in chunks)
    assert b"".join(chunks).startswith(b"id,")


# --- what an export may cost: a rate limit per IP, a cap on exports at once (issue 28) -------

EXPORTS = (
    "/locations/harbour/businesses/export.csv",
    "/locations/harbour/employers/export.csv",
    "/locations/harbour/votes/export.csv",
)


@pytest.fixture
def exporting(app_factory):
    """An app with its own limits, harbour with a listing, and a signed-in owner of it."""

    def build(**settings):
        app = app_factory(**settings)
        with app.app_context():
            location = make_location("harbour")
            make_listing("business", location, "quay-cafe")
            owner = make_user("owner@example.com")
            grant(owner, location, Role.OWNER)
            return app, signed_in(app, owner.email)

    return build


def test_every_export_spends_one_allowance_per_ip(exporting):
    app, owner = exporting(RATELIMIT_EXPORTS_PER_IP="3/hour")
    anonymous = app.test_client()
    first = anonymous.get(EXPORTS[0])
    assert first.status_code == 200
    assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == (
        "3",
        "2",
    )
    assert anonymous.get(EXPORTS[1]).status_code == 200
    assert owner.get(EXPORTS[2]).status_code == 200  # signed in, from the same address

    for client, path in ((anonymous, EXPORTS[0]), (owner, EXPORTS[2])):
        limited = client.get(path)
        assert_problem(limited, 429)
        assert int(limited.headers["Retry-After"]) > 0
        assert limited.headers["X-RateLimit-Remaining"] == "0"
    elsewhere = anonymous.get(EXPORTS[0], environ_base={"REMOTE_ADDR": "10.9.8.7"})
    assert parse(elsewhere)[0]["slug"] == "quay-cafe"


def test_the_default_allowance_is_thirty_exports_an_hour(client, app):
    make_location("harbour")
    statuses = [client.get(EXPORTS[0]).status_code for _ in range(31)]
    assert statuses == [200] * 30 + [429]


def hold(client, path: str = EXPORTS[0]):
    """An export answered and left unread, as a slow client leaves it: its stream is open."""
    response = client.get(path, buffered=False)
    assert response.status_code == 200
    return response


def assert_busy(response) -> None:
    problem = assert_problem(response, 429)
    assert "exports" in problem["detail"]
    assert response.headers["Retry-After"] == "5"
    assert "X-RateLimit-Remaining" not in response.headers  # turned away before it counted


def test_exports_beyond_the_cap_are_turned_away_until_one_ends(exporting):
    app, owner = exporting(EXPORTS_AT_ONCE=2, RATELIMIT_EXPORTS_PER_IP="5/hour")
    anonymous = app.test_client()
    held = [hold(anonymous), hold(owner, EXPORTS[2])]
    for client, path in ((anonymous, EXPORTS[1]), (owner, EXPORTS[2])):
        assert_busy(client.get(path))

    held.pop().close()  # its client went away before reading a byte

    again = anonymous.get(EXPORTS[1])
    assert again.status_code == 200 and parse(again) == []
    assert again.headers["X-RateLimit-Remaining"] == "2"  # the two turned away spent nothing
    held.append(hold(anonymous))
    assert_busy(anonymous.get(EXPORTS[0]))
    rows = b"".join(held[0].response)  # read to its end, as a patient client does
    held[0].close()
    assert rows.startswith(b"id,") and b"quay-cafe" in rows
    held[1].close()
    assert parse(anonymous.get(EXPORTS[0]))[0]["slug"] == "quay-cafe"


def assert_one_slot_free(app) -> None:
    """With EXPORTS_AT_ONCE=1: one export streams (so its slot was given back), and only
    one (so it was given back once)."""
    client = app.test_client()
    held = hold(client)
    assert_busy(client.get(EXPORTS[0]))
    held.close()


def test_a_slot_is_given_back_once_however_the_export_ends(exporting, monkeypatch):
    app, _ = exporting(EXPORTS_AT_ONCE=1)
    client = app.test_client()
    assert_one_slot_free(app)

    # Read in part, then the client goes away.
    partial = hold(client)
    assert next(iter(partial.response)).startswith(b"id,")
    partial.close()
    assert_one_slot_free(app)

    # Refused before it streams: a query it refuses, an unknown location, HEAD, no access.
    assert_problem(client.get(EXPORTS[0] + "?page=2"), 422)
    assert_problem(client.get("/locations/nowhere/businesses/export.csv"), 404)
    assert client.head(EXPORTS[0]).status_code == 200
    assert_problem(client.get(EXPORTS[2]), 401)
    assert_one_slot_free(app)

    # It fails while it streams.
    def broken(*_args, **_kwargs):
        yield b"id,"
        raise RuntimeError("the database went away mid-export")

    monkeypatch.setattr(csv_export, "csv_lines", broken)
    with pytest.raises(RuntimeError):
        client.get(EXPORTS[0])
    monkeypatch.undo()
    assert_one_slot_free(app)


def test_an_export_answered_otherwise_after_its_view_gives_its_slot_back(app_factory):
    """A hook after the view fails: the stream is dropped unread, never closed (the 500
    is answered as in production, not raised into the test)."""
    app = app_factory(EXPORTS_AT_ONCE=1, PROPAGATE_EXCEPTIONS=False)
    failing = []

    @app.after_request
    def fail_once(response):
        if failing:
            raise failing.pop()
        return response

    with app.app_context():
        make_location("harbour")
        failing.append(RuntimeError("a hook failed after the view"))
        assert_problem(app.test_client().get(EXPORTS[0]), 500)
        assert_one_slot_free(app)  # at once, not when the collector finds the stream


TRICKY = ["=1+2", "'=Quoted", "''=Twice", "'Plain", "-5", "+44 1", "@me", "a,b", 'say "hi"',
          "two\nlines", "cr\ronly", "crlf\r\nend", "tab\there", "Zürich ☕", "'", "",
          None]  # fmt: skip


def test_the_database_writes_every_cell_as_the_dump_would(client, app):
    """The listing export's cells are written by the database (sql.csv_cells); the votes
    export's by Python (`csv_export.cell`). The same rows give the same bytes both ways."""
    from sqlalchemy import select

    from directory_api.models import Business
    from directory_api.schemas.listings import ListingOut

    location = make_location("harbour")
    cafes = make_category("cafes")
    instagram, mastodon = make_social("instagram"), make_social("mastodon")
    for number, text in enumerate(TRICKY):
        make_listing(
            "business",
            location,
            f"v-{number:02}",
            name=f"V {number:02}",
            description=text,
            branch=text,
            address=text,
            subcategory=cafes if number % 2 else None,
            # A link may hold a comma: its cell is quoted as a whole.
            socials=[
                (mastodon, f"https://m.example/@{number},a"),
                (instagram, "https://i.example/x"),
            ]
            if number % 3
            else [],
        )
    listings = db.session.scalars(
        select(Business).where(Business.location_id == location.id).order_by(Business.name)
    ).all()
    expected = b"".join(csv_export.csv_lines(ListingOut, [listings]))
    exported = client.get(BUSINESSES + "export.csv?sort=name")
    assert exported.status_code == 200
    assert exported.get_data() == expected
    rows = parse(exported)
    assert [row["description"] for row in rows[:4]] == ["'=1+2", "''=Quoted", "'''=Twice", "'Plain"]
    assert rows[1]["socials"] == "mastodon:https://m.example/@1,a instagram:https://i.example/x"
    assert [row["branch"] for row in rows[9:13]] == [
        "two\nlines",
        "cr\ronly",
        "crlf\r\nend",
        "tab\there",
    ]


def test_the_export_reads_what_the_list_page_does():
    """An export's ETag is the list's revision, turned by changes to what the page's
    statement reads: the export's statement reads those tables and no other."""
    from directory_api.listing_pages import CSV_LINES, OUTPUT
    from directory_api.platform.sql import tables_read

    assert tables_read(CSV_LINES) == tables_read(OUTPUT)


def test_cells_in_sql_are_refused_for_what_sql_cannot_write():
    """At import, as json_of does: a dump hook, or a field over a column of another type."""
    from marshmallow import Schema, fields, post_dump

    from directory_api.listing_pages import _listings
    from directory_api.platform.sql import csv_cells

    class Hooked(Schema):
        name = fields.String()

        @post_dump
        def shout(self, data, **_kwargs):
            return {key: value.upper() for key, value in data.items()}

    class Mismatched(Schema):
        name = fields.Integer()

    with pytest.raises(TypeError, match="dump hooks"):
        csv_cells(Hooked(), _listings.c)
    with pytest.raises(TypeError, match="no CSV cell in SQL for Integer"):
        csv_cells(Mismatched(), _listings.c)


def test_a_line_in_sql_is_refused_for_more_cells_than_a_function_takes(app):
    """A line is one format of its cells, and PostgreSQL's functions take 100 arguments."""
    from sqlalchemy import literal_column, select

    from directory_api.platform.sql import CSV_LINE_CELLS, csv_lines_of

    def cells(number):
        return select(*(literal_column("'x'").label(f"c{n}") for n in range(number)))

    with app.app_context():
        line = db.session.scalar(csv_lines_of(cells(CSV_LINE_CELLS)))
    assert line == ",".join(["x"] * CSV_LINE_CELLS) + "\r\n"
    with pytest.raises(TypeError, match="at most 99 cells"):
        csv_lines_of(cells(CSV_LINE_CELLS + 1))
