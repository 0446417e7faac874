"""API.md 9: no secret outlives its use in clear; personal data is kept only as long as set.

What these tests read straight from the database, they read with plain SQL, past the
application's column types: that is what a dump or a stolen backup would show.
"""

import contextlib
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy
from sqlalchemy import select

from directory_api.cli import run_worker
from directory_api.models import (
    GrantedRole,
    OutboxMessage,
    OutboxStatus,
    RoleGrant,
    Token,
    Vote,
    utcnow,
)
from directory_api.models.token import TokenPurpose
from directory_api.platform.extensions import db
from directory_api.platform.outbox import MAX_ATTEMPTS

from .conftest import link_in, queued_mail, send_outbox, signed_in, smtp_settings
from .factories import PASSWORD, make_location, make_user, make_vote, save
from .test_votes import body_for

LONG_AGO = timedelta(days=400)
DAY = timedelta(days=1)


def raw_database_text() -> str:
    """Every row of every table, as stored."""
    db.session.rollback()
    lines = []
    with db.engine.connect() as connection:
        for table in db.metadata.sorted_tables:
            rows = connection.execute(sqlalchemy.text(f"SELECT * FROM {table.name}"))  # noqa: S608
            lines.extend(f"{table.name}: {tuple(row)}" for row in rows)
    return "\n".join(lines)


def stored_bodies() -> list[str]:
    db.session.rollback()
    with db.engine.connect() as connection:
        return list(connection.scalars(sqlalchemy.text("SELECT body FROM outbox")))


# Each flow: (start it with the app and its super's client, the path its link carries).
def invitation(app, client):
    assert client.post("/supers/", json={"email": "new@example.com"}).status_code == 201
    return "/register/"


def password_reset(app, client):
    make_user("ann@example.com")
    response = app.test_client().post("/me/password-reset", json={"email": "ann@example.com"})
    assert response.status_code == 202
    return "/password-reset/"


def email_change(app, client):
    response = client.post(
        "/me/email-update", json={"email": "moved@example.com", "password": PASSWORD}
    )
    assert response.status_code == 202
    return "/email-update/"


def role_offer(app, client):
    make_user("olive@example.com")  # an existing account: offered the role, not given it
    assert client.post("/supers/", json={"email": "olive@example.com"}).status_code == 201
    return "/roles/accept/"


def reply_notice(app, client):
    vote = make_vote(make_location("harbour"), confirmed=True, your_email="val@example.com")
    response = client.put(f"/locations/harbour/votes/id/{vote.id}/reply", json={"body": "Hi"})
    assert response.status_code == 201
    return "/votes/withdraw/"


@pytest.mark.parametrize(
    "flow", [invitation, password_reset, email_change, role_offer, reply_notice]
)
def test_no_usable_token_is_stored_pending_or_delivered(mail_app, mailbox, flow):
    make_user("super@example.com", is_super=True)
    path = flow(mail_app, signed_in(mail_app, "super@example.com"))
    [message] = [m for m in queued_mail() if path in (m.body or "")]
    token = link_in(message.body, path)

    # Pending: the body is kept, but encrypted; neither the token nor the link is readable.
    assert token not in raw_database_text()
    assert not any(path in body for body in stored_bodies())

    send_outbox(mail_app)
    [delivered] = [m for m in mailbox.messages if path in m.get_content()]
    assert token in delivered.get_content()  # the reader gets the link …
    assert token not in raw_database_text()  # … the database keeps nothing of it
    kept = db.session.get(OutboxMessage, message.id)
    assert (kept.status, kept.body, kept.subject) == (OutboxStatus.SENT, "", message.subject)
    assert kept.recipients == message.recipients


def test_a_failed_message_keeps_its_body_encrypted_for_the_operator(app):
    location = make_location("harbour")  # no e-mail, no owner, no fallback: nobody to send to
    response = app.test_client().post(
        "/locations/harbour/votes/submit/btoc",
        json=body_for("btoc", yourEmail="val@example.com", voteBody="Kind staff"),
    )
    assert response.status_code == 202
    [message] = queued_mail()
    assert message.status == OutboxStatus.FAILED and "Kind staff" in message.body
    assert "Kind staff" not in raw_database_text()
    assert "val@example.com" not in stored_bodies()[0]
    assert location.slug == "harbour"


def queue_reset(app) -> OutboxMessage:
    make_user("ann@example.com")
    response = app.test_client().post("/me/password-reset", json={"email": "ann@example.com"})
    assert response.status_code == 202
    [message] = queued_mail()
    return message


def test_a_body_queued_under_another_key_fails_delivery_naming_the_setting(
    app, app_factory, smtp_server
):
    queue_reset(app)
    rotated = app_factory(SECRET_KEY="a-new-secret", **smtp_settings(smtp_server[1]))
    with rotated.app_context():
        assert send_outbox(rotated).strip() == "sent 0, failed 1; webhooks delivered 0, failed 0"
        [message] = queued_mail()
        assert message.status == OutboxStatus.PENDING  # kept, retried later
        assert message.body is None
        assert "OUTBOX_OLD_KEYS" in message.last_error
    assert smtp_server[0].messages == []


def test_a_body_waiting_for_its_key_is_never_given_up(app, app_factory):
    message = queue_reset(app)
    db.session.execute(
        sqlalchemy.update(OutboxMessage)
        .where(OutboxMessage.id == message.id)
        .values(attempts=MAX_ATTEMPTS - 1)
    )
    db.session.commit()
    rotated = app_factory(SECRET_KEY="a-new-secret")
    with rotated.app_context():
        assert send_outbox(rotated).strip() == "sent 0, failed 1; webhooks delivered 0, failed 0"
        [kept] = queued_mail()
        assert (kept.attempts, kept.status) == (MAX_ATTEMPTS, OutboxStatus.PENDING)


def test_rekey_leaves_a_body_delivered_meanwhile_empty(app, monkeypatch):
    import directory_api.privacy as privacy

    message = queue_reset(app)
    real = privacy.reencrypt

    def deliver_then_reencrypt(token):
        with db.engine.begin() as connection:  # a worker delivers it in between
            connection.execute(
                sqlalchemy.text("UPDATE outbox SET body = '', status = 'sent' WHERE id = :id"),
                {"id": message.id.hex if db.engine.dialect.name == "sqlite" else message.id},
            )
        return real(token)

    monkeypatch.setattr(privacy, "reencrypt", deliver_then_reencrypt)
    result = app.test_cli_runner().invoke(args=["outbox", "rekey"])
    assert json.loads(result.output) == {"reencrypted": 0, "unreadable": 0}
    assert stored_bodies() == [""]


def test_outbox_keys_rotate_without_losing_queued_mail(app, app_factory, smtp_server):
    catcher, port = smtp_server
    queue_reset(app)
    before = stored_bodies()
    rotating = app_factory(OUTBOX_KEY="outbox key two", OUTBOX_OLD_KEYS=["test-only-not-secret"])
    with rotating.app_context():
        result = rotating.test_cli_runner().invoke(args=["outbox", "rekey"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output) == {"reencrypted": 1, "unreadable": 0}
    assert stored_bodies() != before
    # Neither the old OUTBOX_OLD_KEYS nor the old SECRET_KEY is needed any more.
    rotated = app_factory(
        SECRET_KEY="a-new-secret", OUTBOX_KEY="outbox key two", **smtp_settings(port)
    )
    with rotated.app_context():
        assert send_outbox(rotated).strip() == "sent 1, failed 0; webhooks delivered 0, failed 0"
    assert "/password-reset/" in catcher.messages[0].get_content()


def test_rekey_names_bodies_no_key_opens(app, app_factory):
    queue_reset(app)
    lost = app_factory(SECRET_KEY="a-new-secret", OUTBOX_KEY="unrelated")
    with lost.app_context():
        result = lost.test_cli_runner().invoke(args=["outbox", "rekey"])
    assert result.exit_code == 1
    assert '"unreadable": 1' in result.output and "OUTBOX_OLD_KEYS" in result.output


# Retention


def run_retention_command(app) -> dict:
    result = app.test_cli_runner().invoke(args=["retention", "run"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def old_and_new_votes():
    location = make_location("harbour")
    old = make_vote(
        location,
        your_email="Old@Example.com",
        your_phone="+1 555 0100",
        active=True,
        created_at=utcnow() - LONG_AGO,
    )
    new = make_vote(location, your_email="new@example.com", active=True)
    return old, new


def test_retention_redacts_old_votes_submitters_and_keeps_the_rest(app, super_client):
    old, new = old_and_new_votes()
    assert run_retention_command(app)["votesRedacted"] == 1

    staff = super_client.get("/locations/harbour/votes/").get_json()["items"]
    by_id = {item["id"]: item for item in staff}
    redacted, kept = by_id[str(old.id)], by_id[str(new.id)]
    assert (redacted["yourName"], redacted["yourEmail"], redacted["yourPhone"]) == (None,) * 3
    assert redacted["redacted"] is True
    assert (redacted["voteBody"], redacted["businessName"]) == ("Good", "Acme")
    assert (kept["yourEmail"], kept["redacted"]) == ("new@example.com", False)

    public = app.test_client().get("/locations/harbour/votes/").get_json()["items"]
    assert all("redacted" not in item and "yourEmail" not in item for item in public)

    assert "old@example.com" not in raw_database_text().lower()
    row = db.session.get(Vote, old.id)
    assert row.email_hash and len(row.email_hash) == 64  # kept for duplicates and erasure
    # A second run has nothing left to do.
    assert run_retention_command(app)["votesRedacted"] == 0


def test_retention_period_is_a_setting(app_factory):
    short = app_factory(PII_RETENTION_DAYS=10)
    with short.app_context():
        location = make_location("harbour")
        make_vote(location, created_at=utcnow() - timedelta(days=11))
        make_vote(location, created_at=utcnow() - timedelta(days=9))
        assert run_retention_command(short)["votesRedacted"] == 1


def test_retention_deletes_old_delivered_and_failed_mail_and_spent_tokens(app):
    now = utcnow()
    long_ago = now - timedelta(days=31)

    def message(status, created, sent=None):
        return save(
            OutboxMessage(
                recipients=["a@example.com"],
                template="notice",
                subject="s",
                body="" if status is OutboxStatus.SENT else "kept",
                status=status,
                created_at=created,
                sent_at=sent,
            )
        )

    message(OutboxStatus.SENT, long_ago, long_ago)
    message(OutboxStatus.FAILED, long_ago)
    recent_sent = message(OutboxStatus.SENT, long_ago, now).id  # delivered late: kept 30 days
    old_pending = message(OutboxStatus.PENDING, long_ago).id  # still to deliver: kept

    user = make_user("ann@example.com")

    def token(suffix, expires, used=None):
        return save(
            Token(
                user_id=user.id,
                purpose=TokenPurpose.PASSWORD_RESET,
                token_hash=suffix * 64,
                expires_at=expires,
                used_at=used,
            )
        )

    live = token("a", now + timedelta(hours=1)).id
    token("b", now - timedelta(seconds=1))
    token("c", now + timedelta(hours=1), used=now)
    offer = dict(user_id=user.id, role=GrantedRole.SUPER, expires_at=now - timedelta(seconds=1))
    save(RoleGrant(token_hash="d" * 64, **offer))
    live_offer = save(RoleGrant(token_hash="e" * 64, **(offer | {"expires_at": now + DAY}))).id

    report = run_retention_command(app)
    assert report == {
        "votesRedacted": 0,
        "messagesDeleted": 2,
        "tokensDeleted": 3,
        "auditEntriesDeleted": 0,
    }
    db.session.rollback()
    assert set(db.session.scalars(select(OutboxMessage.id))) == {recent_sent, old_pending}
    assert list(db.session.scalars(select(Token.id))) == [live]
    assert list(db.session.scalars(select(RoleGrant.id))) == [live_offer]


def test_the_outbox_worker_applies_retention(app):
    old, new = old_and_new_votes()
    run_worker(interval=0, stop_after=1)
    db.session.rollback()
    assert db.session.get(Vote, old.id).redacted
    assert not db.session.get(Vote, new.id).redacted


# Erasure and export


def ann_votes(app):
    location = make_location("harbour", email="desk@harbour.example")
    redacted = make_vote(location, your_email="ann@example.com", created_at=utcnow() - LONG_AGO)
    run_retention_command(app)
    typed_otherwise = make_vote(location, your_email="ANN@Example.com", your_name="Ann")
    others = make_vote(location, your_email="bob@example.com", your_name="Bob")
    response = app.test_client().post(
        "/locations/harbour/votes/submit/btob",
        json=body_for("btob", yourEmail="ann@example.com", voteBody="Prompt delivery"),
    )
    assert response.status_code == 202
    return redacted, typed_otherwise, others


def test_privacy_export_prints_every_vote_and_message_held_for_an_address(app):
    redacted, typed_otherwise, _ = ann_votes(app)
    staff = make_user("desk-staff@example.com")
    db.session.execute(
        sqlalchemy.update(Vote)
        .where(Vote.id == typed_otherwise.id)
        .values(
            reply_body="Thank you.",
            reply_author_id=staff.id,
            reply_created_at=utcnow(),
            reply_updated_at=utcnow(),
        )
    )
    db.session.commit()
    result = app.test_cli_runner().invoke(args=["privacy", "export", "Ann@example.com"])
    assert result.exit_code == 0, result.output
    exported = json.loads(result.output)
    assert exported["email"] == "ann@example.com"
    assert {vote["id"] for vote in exported["votes"]} == {str(redacted.id), str(typed_otherwise.id)}
    assert {vote["redacted"] for vote in exported["votes"]} == {True, False}
    replies = [vote["reply"] for vote in exported["votes"] if vote["reply"]]
    assert [reply["body"] for reply in replies] == ["Thank you."]
    assert "author" not in replies[0]  # the staff member's address is not Ann's data
    [message] = exported["messages"]
    assert message["replyTo"] == "ann@example.com"
    assert message["recipients"] == ["desk@harbour.example"]
    assert "Prompt delivery" in message["body"]  # pending: the operator sees what is held


def test_privacy_erase_deletes_the_address_votes_and_mail_only(app):
    _, _, others = ann_votes(app)
    runner = app.test_cli_runner()
    refused = runner.invoke(args=["privacy", "erase", "ann@example.com"], input="n\n")
    assert refused.exit_code == 1
    assert db.session.scalar(select(sqlalchemy.func.count()).select_from(Vote)) == 3

    result = runner.invoke(args=["privacy", "erase", "ann@example.com", "--yes"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"votes": 2, "messages": 1}
    db.session.rollback()
    assert list(db.session.scalars(select(Vote.id))) == [others.id]
    assert queued_mail() == []
    assert "ann@example.com" not in raw_database_text().lower()
    after = json.loads(runner.invoke(args=["privacy", "export", "ann@example.com"]).output)
    assert (after["votes"], after["messages"]) == ([], [])


def test_privacy_commands_refuse_what_is_not_an_address(app):
    result = app.test_cli_runner().invoke(args=["privacy", "erase", "not-an-address", "--yes"])
    assert result.exit_code == 2
    assert "Not a valid email address" in result.output


# Migration 0010: addresses stored in the old (lower-cased) form


@contextlib.contextmanager
def no_webhook_events() -> Iterator[None]:
    """Writes through today's models to a schema from before webhooks: the events they
    would write have no table yet."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    from directory_api.webhooks import events

    event.remove(Session, "before_commit", events._write)
    try:
        yield
    finally:
        event.listen(Session, "before_commit", events._write)


def test_migration_rewrites_old_spellings_and_hashes_old_votes(tmp_path):
    """On a database of its own (SQLite), taken to 0009, filled the old way, then upgraded."""
    from flask_migrate import upgrade

    from directory_api import create_app
    from directory_api.models import User
    from directory_api.platform.crypto import email_hash

    app = create_app(
        "testing",
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'old.sqlite3'}",
        SESSION_FILE_DIR=str(tmp_path / "sessions"),
    )
    with app.app_context(), no_webhook_events():
        upgrade(revision="0009")
        old_forms = {
            "straße@example.com": "strasse@example.com",
            "ａｎｎ@example.com": "ann@example.com",  # fullwidth, lower-cased only
            "ann@example.com": "ann@example.com",
        }
        ids = {email: make_user(email).id for email in old_forms}
        # A vote as 0009 stored it: its own columns only (the model has later ones).
        vote_id = uuid.uuid4()
        db.session.execute(
            sqlalchemy.text(
                "INSERT INTO votes (id, location_id, type, active, your_name, your_email,"
                " business_name, vote_body, created_at, updated_at) VALUES (:id, :location,"
                " 'employer', 0, 'Val', 'Straße@Example.com', 'Acme', 'Good', :now, :now)"
            ),
            {"id": vote_id.hex, "location": make_location("harbour").id.hex, "now": utcnow()},
        )
        db.session.commit()

        upgrade()

        db.session.rollback()
        stored = {email: db.session.get(User, ids[email]).email for email in old_forms}
        # ß folds to ss; the fullwidth account collides with an existing one: left for an
        # operator, both unchanged.
        assert stored == {
            "straße@example.com": "strasse@example.com",
            "ａｎｎ@example.com": "ａｎｎ@example.com",
            "ann@example.com": "ann@example.com",
        }
        assert db.session.get(Vote, vote_id).email_hash == email_hash("strasse@example.com")
        db.session.remove()
        db.engine.dispose()
