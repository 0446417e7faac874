"""CSV export (API.md 11): every matching row as the JSON list shows it, streamed, safe to
open in a spreadsheet."""

import csv
import io

import pytest

from directory_api.models import Role

from .conftest import assert_problem, signed_in
from .factories import (
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
    for number in range(130):
        make_listing(
            "business",
            location,
            f"b-{number:03}",
            name=f"Place {number:03}",
            subcategory=cafes if number % 2 else bars,
            socials=[(instagram, f"https://instagram.com/b{number}")] if number % 3 else [],
        )
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
