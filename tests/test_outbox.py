"""The mail outbox: queued with the change, delivered by `flask outbox send`, never lost."""

import logging
import threading
from datetime import timedelta

from directory_api.models import OutboxMessage, OutboxStatus, utcnow
from directory_api.platform.extensions import db
from directory_api.platform.outbox import MAX_ATTEMPTS, backoff, deliver_due, queue_mail

from .conftest import queued_mail, send_outbox, smtp_settings


def queue(to="ann@example.com", **context):
    message = queue_mail(
        to, "role_offer", user=None, token="t0k3n", role="an owner of Harbour", **context
    )
    db.session.commit()
    return message


def test_send_delivers_queued_mail_over_smtp(mail_app, mailbox):
    queue_mail(
        "ann@example.com",
        "role_offer",
        user=None,
        token="t0k3n",
        role="an owner of Harbour",
        reply_to="bob@example.com",
    )
    db.session.commit()
    assert "sent 1, failed 0" in send_outbox(mail_app)
    [message] = mailbox.messages
    assert message["To"] == "ann@example.com"
    assert message["Reply-To"] == "bob@example.com"
    assert message["Subject"] == "You are offered a new role in the Directory"
    assert "an owner of Harbour" in message.get_content()
    [row] = queued_mail()
    assert row.status == OutboxStatus.SENT and row.sent_at is not None and row.attempts == 1
    # Sent once: a second pass finds nothing to do.
    assert "sent 0, failed 0" in send_outbox(mail_app)
    assert len(mailbox.messages) == 1


def test_links_come_from_frontend_url_not_the_request(app_factory, smtp_server):
    app = app_factory(FRONTEND_URL="https://admin.example.org/", **smtp_settings(smtp_server[1]))
    with app.app_context():
        queue_mail("ann@example.com", "password_reset", user=None, token="tok")
        db.session.commit()
        send_outbox(app)
    body = smtp_server[0].messages[0].get_content()
    assert "https://admin.example.org/password-reset/tok" in body


def test_smtp_down_keeps_the_message_for_a_later_pass(app_factory, smtp_server):
    catcher, port = smtp_server
    down = app_factory(MAIL_SERVER="127.0.0.1", MAIL_PORT=1, MAIL_SUPPRESS_SEND=False)
    with down.app_context():
        queue()
        assert "sent 0, failed 1" in send_outbox(down)
        [row] = queued_mail()
        assert row.status == OutboxStatus.PENDING
        assert row.attempts == 1
        assert row.last_error
        assert row.next_attempt_at > utcnow()
        row_id = row.id
        # Not due yet: the backoff holds it back.
        assert "sent 0, failed 0" in send_outbox(down)

    up = app_factory(**smtp_settings(port))
    with up.app_context():
        row = db.session.get(OutboxMessage, row_id)
        row.next_attempt_at = utcnow() - timedelta(seconds=1)
        db.session.commit()
        assert "sent 1, failed 0" in send_outbox(up)
    assert len(catcher.messages) == 1


def test_backoff_grows_and_gives_up_after_the_last_attempt(app_factory):
    assert [backoff(n).total_seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert backoff(30) == timedelta(hours=6)
    app = app_factory(MAIL_SERVER="127.0.0.1", MAIL_PORT=1, MAIL_SUPPRESS_SEND=False)
    with app.app_context():
        message = queue()
        for _ in range(MAX_ATTEMPTS):
            db.session.get(OutboxMessage, message.id).next_attempt_at = utcnow()
            db.session.commit()
            deliver_due()
        row = db.session.get(OutboxMessage, message.id)
        assert row.status == OutboxStatus.FAILED
        assert row.attempts == MAX_ATTEMPTS


def test_without_mail_server_messages_go_to_the_log(app, caplog):
    queue()
    with caplog.at_level(logging.INFO, logger="directory_api.platform.outbox"):
        assert "sent 1, failed 0" in send_outbox(app)
    assert "You are offered a new role in the Directory" in caplog.text
    assert queued_mail()[0].status == OutboxStatus.SENT


def test_a_message_exists_only_if_its_change_was_committed(app):
    queue_mail("ann@example.com", "role_offer", user=None, token="t0k3n", role="x")
    db.session.rollback()
    assert queued_mail() == []


def test_concurrent_senders_deliver_each_message_once(app_factory, smtp_server):
    catcher, port = smtp_server
    catcher.delay = 0.01  # slow SMTP, so the two senders overlap
    settings = smtp_settings(port)
    app = app_factory(**settings)
    with app.app_context():
        for number in range(30):
            queue_mail(
                f"user{number}@example.com", "role_offer", user=None, token="t0k3n", role="x"
            )
        db.session.commit()

    # Each sender is its own app (own engine and connections), built before the race starts.
    worker_apps = [app_factory(**settings) for _ in range(2)]
    reports = []

    def sender(worker_app) -> None:
        with worker_app.app_context():
            reports.append(deliver_due())

    threads = [threading.Thread(target=sender, args=(worker,)) for worker in worker_apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    recipients = sorted(rcpt for _, rcpts in catcher.envelopes for rcpt in rcpts)
    assert recipients == sorted(f"user{n}@example.com" for n in range(30))
    assert sum(report.sent for report in reports) == 30
    with app.app_context():
        assert {row.status for row in queued_mail()} == {OutboxStatus.SENT}


def test_smtp_down_never_fails_the_request_and_a_later_pass_delivers(app_factory, smtp_server):
    from .conftest import signed_in
    from .factories import make_user

    catcher, port = smtp_server
    down = app_factory(MAIL_SERVER="127.0.0.1", MAIL_PORT=1, MAIL_SUPPRESS_SEND=False)
    with down.app_context():
        make_user("ann@example.com")
        response = down.test_client().post("/me/password-reset", json={"email": "ann@example.com"})
        assert response.status_code == 202
        make_user("boss@example.com", is_super=True)
        invite = signed_in(down, "boss@example.com").post(
            "/supers/", json={"email": "new@example.com"}
        )
        assert invite.status_code == 201
        assert "sent 0, failed 2" in send_outbox(down)
        db.session.query(OutboxMessage).update({"next_attempt_at": utcnow()})
        db.session.commit()

    up = app_factory(**smtp_settings(port))
    with up.app_context():
        assert "sent 2, failed 0" in send_outbox(up)
    assert [m["Subject"] for m in catcher.to("ann@example.com")] == [
        "Reset your Directory password"
    ]
    assert "/register/" in catcher.to("new@example.com")[0].get_content()
