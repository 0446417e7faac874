"""The mail outbox: queue a message with the change that causes it, deliver it later.

`queue_mail` only adds a row to the current transaction, so a message exists exactly when
the change that caused it was committed. `deliver_due` sends what is due; a failure leaves
the message pending with exponential backoff. Each message is claimed by an atomic update
(and, on PostgreSQL, `FOR UPDATE SKIP LOCKED`), so several workers never send one twice,
and no lock is held while talking to the SMTP server.
"""

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flask import current_app, render_template
from flask_mail import Message
from sqlalchemy import select, update

from .extensions import db, mail
from .models import OutboxMessage, OutboxStatus, utcnow

log = logging.getLogger(__name__)

# A claimed message is retried after this long if its worker died mid-send.
CLAIM_LEASE = timedelta(minutes=5)
MAX_ATTEMPTS = 10


def render_mail(template: str, **context: Any) -> tuple[str, str]:
    """Render mail/<template>.txt, whose first line is `Subject: …`, into subject and body."""
    context.setdefault("frontend_url", current_app.config["FRONTEND_URL"].rstrip("/"))
    text = render_template(f"mail/{template}.txt", **context)
    first, _, body = text.partition("\n")
    if not first.startswith("Subject: "):
        raise ValueError(f"mail/{template}.txt must start with 'Subject: '")
    return first.removeprefix("Subject: ").strip(), body.lstrip("\n")


def queue_mail(
    recipients: str | list[str], template: str, *, reply_to: str | None = None, **context: Any
) -> OutboxMessage:
    """Add a message to the session; it is sent once the caller's transaction commits."""
    subject, body = render_mail(template, **context)
    message = OutboxMessage(
        recipients=[recipients] if isinstance(recipients, str) else list(recipients),
        subject=subject,
        body=body,
        reply_to=reply_to,
        status=OutboxStatus.PENDING,
        attempts=0,
        next_attempt_at=utcnow(),
    )
    db.session.add(message)
    return message


def backoff(attempts: int) -> timedelta:
    """30 s, 1 min, 2 min … capped at 6 hours."""
    return min(timedelta(seconds=30 * 2 ** max(attempts - 1, 0)), timedelta(hours=6))


def send_now(message: OutboxMessage) -> None:
    """Hand one message to SMTP, or to the log when no MAIL_SERVER is configured."""
    if not current_app.config.get("MAIL_SERVER"):
        log.info(
            "mail (no MAIL_SERVER; logged instead of sent) to=%s subject=%r\n%s",
            ", ".join(message.recipients),
            message.subject,
            message.body,
        )
        return
    mail.send(
        Message(
            subject=message.subject,
            recipients=message.recipients,
            body=message.body,
            reply_to=message.reply_to,
        )
    )


def _claim_next() -> OutboxMessage | None:
    """Take the next due message for this worker, or None when nothing is due."""
    now = utcnow()
    stmt = (
        select(OutboxMessage)
        .where(OutboxMessage.status == OutboxStatus.PENDING, OutboxMessage.next_attempt_at <= now)
        .order_by(OutboxMessage.next_attempt_at, OutboxMessage.id)
        .limit(1)
    )
    while True:
        candidate = db.session.scalar(stmt.with_for_update(skip_locked=True))
        if candidate is None:
            db.session.commit()
            return None
        claimed = db.session.execute(
            update(OutboxMessage)
            .where(
                OutboxMessage.id == candidate.id,
                OutboxMessage.status == OutboxStatus.PENDING,
                OutboxMessage.attempts == candidate.attempts,
            )
            .values(attempts=candidate.attempts + 1, next_attempt_at=now + CLAIM_LEASE)
            .execution_options(synchronize_session=False)
        ).rowcount
        db.session.commit()
        if claimed == 1:
            db.session.refresh(candidate)
            return candidate
        # Another worker claimed it between our read and our write; look again.


@dataclass
class DeliveryReport:
    sent: int = 0
    failed: int = 0


def deliver_due(limit: int = 500) -> DeliveryReport:
    """Send every due message (up to `limit`); failures are rescheduled with backoff."""
    report = DeliveryReport()
    for _ in range(limit):
        message = _claim_next()
        if message is None:
            break
        try:
            send_now(message)
        except Exception as error:  # SMTP errors, refused connections, timeouts …
            report.failed += 1
            message.last_error = f"{type(error).__name__}: {error}"[:2000]
            if message.attempts >= MAX_ATTEMPTS:
                message.status = OutboxStatus.FAILED
            else:
                message.next_attempt_at = utcnow() + backoff(message.attempts)
            log.warning(
                "mail %s not delivered (attempt %s): %s",
                message.id,
                message.attempts,
                message.last_error,
            )
        else:
            report.sent += 1
            message.status = OutboxStatus.SENT
            message.sent_at = utcnow()
        db.session.commit()
    return report


def run_worker(interval: float, stop_after: int | None = None) -> None:
    """Deliver forever (or for `stop_after` passes), sleeping `interval` seconds when idle."""
    passes = 0
    while stop_after is None or passes < stop_after:
        report = deliver_due()
        passes += 1
        if report.sent == 0 and report.failed == 0:
            time.sleep(interval)
