"""Each listing's output stored with it (listing_pages.py, migration 0025): what pages and
exports read is what the listing shows now, however it was changed, and stored again by
the app's own changes."""

import importlib.util
from pathlib import Path

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.sql.visitors import iterate

from directory_api.listing_pages import (
    COMPUTED_CSV,
    COMPUTED_JSON,
    _listings,
    _with_subcategory,
    csv_output,
    json_output,
)
from directory_api.models import Listing, ListingSocial
from directory_api.platform.extensions import db

from .factories import make_category, make_listing, make_social

MIGRATION = Path(__file__).parents[1] / "migrations" / "versions" / "0025_listing_outputs_stored.py"
PAGE = "/locations/harbour/businesses/"
EXPORT = "/locations/harbour/businesses/export.csv"


def migration_0025():
    spec = importlib.util.spec_from_file_location("migration_0025", MIGRATION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outputs() -> dict[str, tuple]:
    """Each listing's stored outputs beside those written from it now, by slug."""
    rows = db.session.execute(
        select(
            _listings.c.slug,
            _listings.c.output_json,
            _listings.c.output_csv,
            COMPUTED_JSON,
            COMPUTED_CSV,
        )
    )
    return {
        slug: (stored_json, stored_csv, json, csv)
        for slug, stored_json, stored_csv, json, csv in rows
    }


def assert_stored_and_current() -> None:
    for slug, (stored_json, stored_csv, json, csv) in outputs().items():
        assert stored_json is not None and stored_csv is not None, slug
        assert (stored_json, stored_csv) == (json, csv), slug


@pytest.fixture
def listed(app, world):
    cafes = make_category("cafes", "Cafés")
    instagram = make_social("instagram")
    make_listing(
        "business",
        world["harbour"],
        "mill",
        name="Mill",
        subcategory=cafes,
        socials=[(instagram, "https://i.example/mill")],
    )
    make_listing("business", world["harbour"], "bakery", name="Bakery")
    return {"cafes": cafes, "instagram": instagram}


def test_the_triggers_watch_every_column_the_output_shows():
    """A column added to the output and not to the triggers would go stale when changed by
    hand: the migration's list is the output's columns."""
    written = select(json_output(_listings), *csv_output(_listings)).select_from(
        _with_subcategory(_listings)
    )
    read = {
        column.key for column in iterate(written) if getattr(column, "table", None) is _listings
    }
    assert set(migration_0025().SHOWN) == read


def test_every_change_the_app_makes_stores_the_outputs_again(app, world, listed):
    assert_stored_and_current()  # new listings, a new link
    mill = db.session.scalar(select(Listing).where(Listing.slug == "mill"))
    mill.name = 'Mill, "the old one"'
    mill.description = "=cmd"
    db.session.commit()
    assert_stored_and_current()
    facebook = make_social("facebook")
    mill.socials.append(ListingSocial(social=facebook, url="https://f.example/mill", position=1))
    db.session.commit()
    assert_stored_and_current()
    listed["cafes"].slug = "coffee"  # every listing of the subcategory
    listed["instagram"].slug = "insta"  # every listing linking to it
    db.session.commit()
    assert_stored_and_current()
    mill.socials.pop(0)
    db.session.commit()
    assert_stored_and_current()
    stored = outputs()["mill"]
    assert '"name":"Mill, \\"the old one\\""' in stored[0] and '"social":"facebook"' in stored[0]
    assert stored[1].startswith(str(mill.id)) and '"Mill, ""the old one""",coffee' in stored[1]
    assert stored[1].endswith(",'=cmd,,,,,,facebook:https://f.example/mill\r\n")


def test_the_pages_and_the_export_read_the_stored_outputs(app, world, listed, client):
    """Pages show what is stored (a change to another column, the counts, leaves it)."""
    db.session.execute(
        text(
            "UPDATE listings SET output_json = :json, output_csv = :line, vote_count = 3 "
            "WHERE slug = 'bakery'"
        ),
        {"json": '{"stored":true}', "line": "stored,line\r\n"},
    )
    db.session.commit()
    assert {"stored": True} in client.get(PAGE).get_json()["items"]
    assert b"\r\nstored,line\r\n" in client.get(EXPORT).data


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE listings SET name = 'Renamed' WHERE slug = 'mill'",
        "UPDATE listings SET updated_at = created_at WHERE slug = 'mill'",
        "UPDATE categories SET slug = 'renamed' WHERE slug = 'cafes'",
        "UPDATE socials SET slug = 'renamed' WHERE slug = 'instagram'",
        "UPDATE listing_socials SET url = 'https://renamed.example'",
        "DELETE FROM listing_socials",
    ],
)
def test_a_change_by_hand_clears_the_outputs_it_makes_stale(app, world, listed, change):
    """SQL by hand, or an older release during a rolling deploy: the triggers clear the
    outputs, which reads then write as they are read; the others stay stored."""
    db.session.execute(text(change))
    db.session.commit()
    found = outputs()
    assert found["mill"][:2] == (None, None)
    assert found["bakery"][0] is not None  # untouched
    for stored_json, stored_csv, json, csv in found.values():
        assert stored_json in (None, json) and stored_csv in (None, csv)


def test_a_change_by_hand_to_what_is_not_shown_keeps_the_outputs(app, world, listed):
    db.session.execute(text("UPDATE listings SET vote_count = 5, search_text = 'x'"))
    db.session.execute(text("UPDATE categories SET name = 'Renamed'"))
    db.session.execute(text("UPDATE socials SET name = 'Renamed'"))
    db.session.commit()
    assert_stored_and_current()


def test_missing_outputs_are_stored_by_the_command(app, world, listed):
    db.session.execute(update(Listing).values(output_json=None, output_csv=None))
    db.session.commit()
    page = app.test_client().get(PAGE).get_json()  # written as read meanwhile
    assert {item["name"] for item in page["items"]} == {"Mill", "Bakery"}

    result = app.test_cli_runner().invoke(args=["listings", "store-outputs"])

    assert result.exit_code == 0 and "2 listings' outputs stored" in result.output
    assert_stored_and_current()
    again = app.test_cli_runner().invoke(args=["listings", "store-outputs"])
    assert "0 listings' outputs stored" in again.output
