"""Each listing's output stored with it (listing_pages.py, migration 0025): what pages and
exports read is what the listing shows now, however it was changed, and stored again by
the app's own changes."""

import hashlib
import importlib.util
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.visitors import iterate

from directory_api.listing_pages import (
    COMPUTED_CSV,
    COMPUTED_JSON,
    _listings,
    _with_subcategory,
    csv_output,
    json_output,
    store_missing_outputs,
)
from directory_api.models import Listing, ListingSocial, Social
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
    # A slug of a category or a social: the triggers clear the outputs that show it, the
    # reads write them, and the worker (store_missing_outputs) stores them again.
    listed["cafes"].slug = "coffee"  # every listing of the subcategory
    listed["instagram"].slug = "insta"  # every listing linking to it
    db.session.commit()
    assert outputs()["mill"][:2] == (None, None)
    assert '"subcategory":"coffee"' in outputs()["mill"][2]
    assert store_missing_outputs() == 1
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


def test_a_listing_edited_while_missing_outputs_are_stored_keeps_its_own(app, world, listed):
    """PostgreSQL, READ COMMITTED: the store waits for the edit's lock, then writes from a
    snapshot that sees it (rows locked first), not the text of before over it."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("row locks are PostgreSQL's (CI's PostgreSQL pass runs it)")
    db.session.execute(text("UPDATE listings SET output_json = NULL, output_csv = NULL"))
    db.session.commit()
    mill = db.session.scalar(select(Listing).where(Listing.slug == "mill"))
    mill.name = "Renamed Mill"
    db.session.flush()  # stored by this flush, the row locked until the commit
    storing = in_thread(app, store_missing_outputs)
    time.sleep(0.5)  # the store waits for the row
    db.session.commit()
    storing.join(10)
    assert_stored_and_current()
    assert '"name":"Renamed Mill"' in outputs()["mill"][0]


def test_a_social_edited_beside_a_listing_edit_does_not_deadlock(app, world, listed):
    """A listing's edit locks its row, then its counts' (keep_pages). A social's edit
    beside it clears the outputs that show its slug (the listings' rows, by trigger) and
    turns every revision (the counts'), and stores no output after that: it takes the
    listings' locks before the counts', as the listing's edit does."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("row locks are PostgreSQL's (CI's PostgreSQL pass runs it)")
    db.session.execute(text("UPDATE listings SET name = 'Renamed Mill' WHERE slug = 'mill'"))
    failed = []

    def edit_social():
        social = db.session.scalar(select(Social).where(Social.slug == "instagram"))
        social.slug = "insta"
        try:
            db.session.commit()
        except Exception as error:
            failed.append(error)
            db.session.rollback()

    editing = in_thread(app, edit_social)
    time.sleep(0.5)  # it waits for the listing's row
    db.session.execute(text("UPDATE listing_counts SET revision = revision + 1"))
    db.session.commit()
    editing.join(10)
    assert failed == []
    store_missing_outputs()
    assert_stored_and_current()
    assert '"social":"insta"' in outputs()["mill"][0]


def in_thread(app, work) -> threading.Thread:
    def run():
        with app.app_context():
            try:
                work()
            finally:
                db.session.remove()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# The statement that writes a stored output, as each database is given it. Stored outputs
# outlive the code that wrote them: a change to what they hold (ListingOut, how sql.py
# writes a field) needs a migration that clears them (UPDATE listings SET output_json =
# NULL, output_csv = NULL), for the reads to write and the worker to store them anew; then
# write the new digest here.
OUTPUT_DIGEST = "2539c39ccb68cb40"


def test_the_stored_outputs_format_is_the_one_migrations_know():
    written = select(json_output(_listings), *csv_output(_listings)).select_from(
        _with_subcategory(_listings)
    )
    texts = [str(written.compile(dialect=dialect.dialect())) for dialect in (postgresql, sqlite)]
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    assert digest == OUTPUT_DIGEST, (
        "What a stored listing output holds changed: add a migration that clears them "
        f"(see OUTPUT_DIGEST's comment), then set OUTPUT_DIGEST = {digest!r}."
    )


def test_the_worker_stores_missing_outputs_each_minute(app, world, listed, monkeypatch):
    from directory_api import cli

    assert (60.0, cli.store_listing_outputs) in cli.HOUSEKEEPING
    db.session.execute(text("UPDATE listings SET output_json = NULL, output_csv = NULL"))
    db.session.commit()
    monkeypatch.setattr(cli, "OUTPUTS_STORED_A_PASS", 1)
    batches = []
    monkeypatch.setattr(cli, "store_missing_outputs", lambda **kw: batches.append(kw) or 0)
    cli.store_listing_outputs()
    assert batches == [{"most": 1}]
    monkeypatch.undo()

    cli.store_listing_outputs()

    assert_stored_and_current()
