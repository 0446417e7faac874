"""Rotating SECRET_KEY (API.md 18), as an operator does it: restart with a new
SECRET_KEY and the old one in SECRET_KEY_FALLBACKS. Sessions, pending mail, challenges and
duplicate detection carry over; without the fallback, they would not (the tests show
both, so they can fail)."""

import uuid

import pytest
from sqlalchemy import delete, select

from directory_api.models import Role, Vote
from directory_api.platform.extensions import db

from .conftest import assert_problem, queued_mail, send_outbox, signed_in, smtp_settings
from .factories import grant, make_location, make_user
from .test_public_forms import post, solve

OLD, NEW = "the-old-secret-key-" + "o" * 20, "the-new-secret-key-" + "n" * 20


@pytest.fixture
def before(app_factory, smtp_server):
    """The service under the old key: a signed-in owner, a receipt queued (its body
    encrypted), a vote from val@ (its address hashed), a challenge issued."""
    catcher, port = smtp_server
    prefix = f"rotation-{uuid.uuid4().hex[:8]}:"  # one store for the app before and after
    app = app_factory(
        SECRET_KEY=OLD, VOTE_CHALLENGE="required", SESSION_KEY_PREFIX=prefix, **smtp_settings(port)
    )
    with app.app_context():
        harbour = make_location("harbour", email="desk@harbour.example")
        grant(make_user("owner@example.com"), harbour, Role.OWNER)
        owner = signed_in(app, "owner@example.com")
        client = app.test_client()
        first = post(client, altcha=solve(client), yourEmail="val@example.org")
        assert first.status_code == 201
        unsolved = solve(client)  # solved under the old key, sent after the change
        assert [m.status for m in queued_mail(template="vote_receipt")] == ["pending"]
        yield {
            "owner": owner,
            "challenge": unsolved,
            "port": port,
            "catcher": catcher,
            "prefix": prefix,
        }


def restarted(app_factory, before: dict, **keys):
    return app_factory(
        VOTE_CHALLENGE="required",
        SESSION_KEY_PREFIX=before["prefix"],
        **smtp_settings(before["port"]),
        **keys,
    )


def test_with_the_old_key_as_a_fallback_nothing_is_lost(app_factory, before):
    app = restarted(app_factory, before, SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD])
    with app.app_context():
        cookie = before["owner"].get_cookie("session") or before["owner"].get_cookie(
            "__Host-session"
        )
        owner = app.test_client()
        owner.set_cookie(cookie.key, cookie.value)
        assert owner.get("/me/").get_json()["email"] == "owner@example.com"
        assert owner.get("/me/").status_code == 200  # moved under the new key: found again
        assert "sent 1, failed 0" in send_outbox(app)  # the receipt queued before
        assert before["catcher"].messages[0]["To"] == "val@example.org"
        client = app.test_client()
        again = post(client, altcha=before["challenge"], yourEmail="val@example.org")
        assert again.status_code == 201, again.get_json()
        first, second = db.session.scalars(select(Vote).order_by(Vote.created_at)).all()
        assert second.duplicate_of_id == first.id  # the same address across the change
        assert second.email_hash != first.email_hash  # hashed under the new key


def session_cookie(client):
    return client.get_cookie("session") or client.get_cookie("__Host-session")


def test_a_sign_out_is_not_undone_by_a_request_that_read_the_old_entry(
    app_factory, before, monkeypatch
):
    """Two requests with one cookie, both reading the session under the old key: the
    first moves it and signs out before the second moves it. The second must not bring
    the session back."""
    app = restarted(app_factory, before, SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD])
    cookie = session_cookie(before["owner"])
    interface = app.session_interface
    move = interface._move
    raced = []

    def the_other_request_first(*args):
        if not raced:
            raced.append(True)
            other = app.test_client()
            other.set_cookie(cookie.key, cookie.value)
            assert other.get("/me/").status_code == 200  # moved under NEW
            assert other.post("/auth/logout").status_code == 204
        return move(*args)

    monkeypatch.setattr(interface, "_move", the_other_request_first)
    with app.app_context():
        late = app.test_client()
        late.set_cookie(cookie.key, cookie.value)
        assert_problem(late.get("/me/"), 401)
        assert_problem(late.get("/me/"), 401)
    assert raced


def test_without_the_fallback_they_are_lost(app_factory, before):
    app = restarted(app_factory, before, SECRET_KEY=NEW)
    with app.app_context():
        cookie = before["owner"].get_cookie("session") or before["owner"].get_cookie(
            "__Host-session"
        )
        owner = app.test_client()
        owner.set_cookie(cookie.key, cookie.value)
        assert_problem(owner.get("/me/"), 401)
        assert "sent 0, failed 1" in send_outbox(app)
        client = app.test_client()
        assert_problem(post(client, altcha=before["challenge"], yourEmail="val@example.org"), 422)
        post(client, altcha=solve(client), yourEmail="val@example.org")
        second = db.session.scalars(select(Vote).order_by(Vote.created_at.desc())).first()
        assert second.duplicate_of_id is None


def test_pii_hash_key_keeps_hashes_and_still_matches_the_old_ones(app_factory, before):
    """Moving the address hash to its own key: old hashes (under SECRET_KEY) still match,
    and from then on a SECRET_KEY rotation never touches the hashes."""
    pii = "a-pii-hash-key-" + "p" * 24
    app = restarted(app_factory, before, SECRET_KEY=OLD, PII_HASH_KEY=pii)
    with app.app_context():
        client = app.test_client()
        post(client, altcha=solve(client), yourEmail="val@example.org")
    later = restarted(
        app_factory, before, SECRET_KEY=NEW, SECRET_KEY_FALLBACKS=[OLD], PII_HASH_KEY=pii
    )
    with later.app_context():
        client = later.test_client()
        post(client, altcha=solve(client), yourEmail="VAL@example.org")
        first, second, third = db.session.scalars(select(Vote).order_by(Vote.created_at)).all()
        assert second.duplicate_of_id == first.id
        assert third.duplicate_of_id == first.id
        assert third.email_hash == second.email_hash  # PII_HASH_KEY's, before and after


def duplicate_flagged(app, email: str = "val@example.org") -> bool:
    """Whether a new vote from `email` is flagged as a duplicate of an earlier one."""
    with app.app_context():
        client = app.test_client()
        assert post(client, altcha=solve(client), yourEmail=email).status_code == 201
        newest = db.session.scalars(select(Vote).order_by(Vote.created_at.desc())).first()
        return newest.duplicate_of_id is not None


def test_the_secret_keys_hashes_are_retired_when_no_longer_wanted(app_factory, before):
    """With PII_HASH_KEY set, hashes under the secret keys match until
    PII_HASH_MATCH_SECRET_KEYS is turned off; PII_HASH_OLD_KEYS keeps a key's hashes
    matching whatever SECRET_KEY becomes."""
    pii = "a-pii-hash-key-" + "p" * 24
    keys = {"SECRET_KEY": NEW, "SECRET_KEY_FALLBACKS": [OLD], "PII_HASH_KEY": pii}
    retired = restarted(app_factory, before, **keys, PII_HASH_MATCH_SECRET_KEYS=False)
    assert retired.extensions["email_hash_keys"] == retired.extensions["email_hash_keys"][:1]
    assert not duplicate_flagged(retired, "VAL@example.org")  # the vote under OLD: not seen
    kept = restarted(
        app_factory,
        before,
        SECRET_KEY=NEW,
        PII_HASH_KEY=pii,
        PII_HASH_OLD_KEYS=[OLD],
        PII_HASH_MATCH_SECRET_KEYS=False,
    )
    assert len(kept.extensions["email_hash_keys"]) == 2  # PII_HASH_KEY's and OLD's: not NEW's
    with kept.app_context():  # only the vote hashed under OLD is left to match
        first = db.session.scalars(select(Vote).order_by(Vote.created_at)).first()
        db.session.execute(delete(Vote).where(Vote.id != first.id))
        db.session.commit()
    assert duplicate_flagged(kept)
    assert not duplicate_flagged(
        restarted(app_factory, before, SECRET_KEY=NEW, PII_HASH_KEY="another-pii-key-" + "q" * 24)
    )  # the check that it can fail: neither OLD nor the first PII_HASH_KEY matches


def test_without_pii_hash_key_new_hashes_are_secret_keys_even_with_old_pii_keys(app_factory):
    from directory_api.platform.crypto import derive_key

    app = app_factory(SECRET_KEY=NEW, PII_HASH_OLD_KEYS=["a-retired-pii-key-" + "r" * 20])
    current, *accepted = app.extensions["email_hash_keys"]
    assert current == derive_key(NEW, "vote email hash")  # never a retired key's
    assert len(accepted) == 1


def test_a_weak_pii_hash_key_stops_production(app_factory):
    from config import SettingsError

    with pytest.raises(SettingsError, match="PII_HASH_KEY"):
        from directory_api import create_app

        create_app(
            "production",
            SECRET_KEY=NEW,
            PII_HASH_KEY="change-me",
            SQLALCHEMY_DATABASE_URI="postgresql://x@127.0.0.1/x",
        )
