"""The mail outbox: queue a message with the change that causes it, deliver it later.

`queue_mail` only adds a row to the current transaction, so a message exists exactly when
the change that caused it was committed. `deliver_due` sends what is due; a failure leaves
the message pending with exponential backoff. Each message is claimed by an atomic update
(and, on PostgreSQL, `FOR UPDATE SKIP LOCKED`), so several workers never send one twice,
and no lock is held while talking to the SMTP server.

A claim is a lease (`OUTBOX_LEASE_SECONDS`, leases.py): a message whose worker died is
taken again once it runs out, and a worker ends its SMTP conversation before then (every
exchange has `MAIL_TIMEOUT`, the whole a deadline), so two workers are never sending one
message at once.
The outcome is recorded only while the claim is still the worker's own.
"""

import contextlib
import enum
import logging
import smtplib
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import flask_mail
from flask import current_app, render_template
from flask_mail import Message
from sqlalchemy import JSON, Index, Integer, String, Text, delete
from sqlalchemy.orm import Mapped, mapped_column

from .email_addresses import EMAIL_LENGTH
from .extensions import db
from .leases import Claim, claim_next, settle
from .types import EncryptedText, IdMixin, UTCDateTime, string_enum, utcnow

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 10


class OutboxStatus(enum.StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    HELD = "held"  # kept, not sent, until released (pending) or discarded


class OutboxMessage(IdMixin, db.Model):
    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_status_next_attempt", "status", "next_attempt_at"),
        # Retention: sent messages by when they were sent, others by when they were made.
        Index("ix_outbox_status_sent_at", "status", "sent_at"),
        Index("ix_outbox_status_created_at", "status", "created_at"),
    )

    recipients: Mapped[list[str]] = mapped_column(JSON)
    template: Mapped[str] = mapped_column(String(64), server_default="")
    subject: Mapped[str] = mapped_column(String(998))
    # Encrypted while pending (API.md 9); emptied once delivered. None: no key opens it.
    body: Mapped[str | None] = mapped_column(EncryptedText, nullable=False)
    reply_to: Mapped[str | None] = mapped_column(String(EMAIL_LENGTH))
    status: Mapped[OutboxStatus] = mapped_column(
        string_enum(OutboxStatus, "outbox_status"),
        default=OutboxStatus.PENDING,
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What the message is about when that can be deleted ("vote:<id>"): its messages, which
    # hold the same person's address, go with it (`outbox.forget_messages_about`).
    about: Mapped[str | None] = mapped_column(String(64), index=True)


def render_mail(template: str, **context: Any) -> tuple[str, str]:
    """Render mail/<template>.txt, whose first line is `Subject: …`, into subject and body."""
    context.setdefault("frontend_url", current_app.config["FRONTEND_URL"].rstrip("/"))
    text = render_template(f"mail/{template}.txt", **context)
    first, _, body = text.partition("\n")
    if not first.startswith("Subject: "):
        raise ValueError(f"mail/{template}.txt must start with 'Subject: '")
    return first.removeprefix("Subject: ").strip(), body.lstrip("\n")


def queue_mail(
    recipients: str | list[str],
    template: str,
    *,
    reply_to: str | None = None,
    about: str | None = None,
    **context: Any,
) -> OutboxMessage:
    """Add a message to the session; it is sent once the caller's transaction commits.
    `about` names what it belongs to, if that may be deleted with its messages."""
    subject, body = render_mail(template, **context)
    message = OutboxMessage(
        recipients=[recipients] if isinstance(recipients, str) else list(recipients),
        template=template,
        subject=subject,
        body=body,
        reply_to=reply_to,
        status=OutboxStatus.PENDING,
        attempts=0,
        next_attempt_at=utcnow(),
        about=about,
    )
    db.session.add(message)
    return message


def forget_messages_about(*about: str) -> None:
    """Delete every message these names are `about`, sent or not (what it was about is
    gone)."""
    db.session.execute(delete(OutboxMessage).where(OutboxMessage.about.in_(about)))


def backoff(attempts: int) -> timedelta:
    """30 s, 1 min, 2 min … capped at 6 hours."""
    return min(timedelta(seconds=30 * 2 ** max(attempts - 1, 0)), timedelta(hours=6))


class BoundedSMTPConnection(flask_mail.Connection):
    """Flask-Mail's connection with a timeout on every exchange and a hard deadline.

    A server that accepts and never answers would otherwise hold the worker (and its claim)
    forever. The deadline ends the conversation before the claim's lease runs out, so no
    other worker can start on a message while this one may still be sending it.
    """

    def __init__(self, state: Any, timeout: float, deadline: float) -> None:
        super().__init__(state)
        self.timeout = timeout
        self.deadline = deadline
        self.watchdog: threading.Timer | None = None

    def configure_host(self) -> smtplib.SMTP:
        smtp_class = smtplib.SMTP_SSL if self.mail.use_ssl else smtplib.SMTP
        host = smtp_class(timeout=self.timeout)  # no host yet: connect() below is bounded too
        self.watchdog = threading.Timer(max(self.deadline - time.monotonic(), 0), hang_up, [host])
        self.watchdog.daemon = True
        self.watchdog.start()
        host.connect(self.mail.server, self.mail.port)
        if self.mail.use_tls:
            host.starttls()
        if self.mail.username and self.mail.password:
            host.login(self.mail.username, self.mail.password)
        return host

    def __exit__(self, exc_type: Any, exc_value: Any, tb: Any) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        if self.host is not None:
            # The message was accepted (or refused) already: a QUIT that fails changes neither.
            with contextlib.suppress(smtplib.SMTPException, OSError):
                self.host.quit()
            self.host.close()


def hang_up(host: smtplib.SMTP) -> None:
    """Past the deadline: shut the socket, which wakes the blocked read with an error."""
    sock = getattr(host, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def message_id(message: OutboxMessage) -> str:
    """The same Message-ID on every attempt, so a receiver can drop a repeat (SMTP cannot
    promise once: a server may accept a message whose 250 answer never reaches us)."""
    sender = current_app.config["MAIL_DEFAULT_SENDER"]
    domain = sender.rpartition("@")[2].rstrip(">").strip() or "localhost"
    return f"<{message.id}@{domain}>"


class UndecryptableBody(Exception):
    pass


def send_now(message: OutboxMessage, deadline: float) -> None:
    """Hand one message to SMTP (or to the log without MAIL_SERVER), by `deadline`
    (a time.monotonic() value) at the latest."""
    config = current_app.config
    if message.body is None:
        raise UndecryptableBody(
            "no configured key opens this message's body: list the secret it was queued "
            "under in OUTBOX_OLD_KEYS"
        )
    if not config.get("MAIL_SERVER"):
        log.info(
            "mail (no MAIL_SERVER; logged instead of sent) to=%s subject=%r\n%s",
            ", ".join(message.recipients),
            message.subject,
            message.body,
        )
        if config.get("MAIL_LOG_FILE"):
            with open(config["MAIL_LOG_FILE"], "a", encoding="utf-8") as mail_log:
                recipients = ", ".join(message.recipients)
                mail_log.write(
                    f"To: {recipients}\nSubject: {message.subject}\n\n{message.body}\n\n"
                )
        return
    outgoing = Message(
        subject=message.subject,
        recipients=message.recipients,
        body=message.body,
        reply_to=message.reply_to,
    )
    outgoing.msgId = message_id(message)
    state = current_app.extensions["mail"]
    if state.suppress:
        return
    with BoundedSMTPConnection(state, config["MAIL_TIMEOUT"], deadline) as connection:
        outgoing.send(connection)


def lease() -> timedelta:
    return timedelta(seconds=current_app.config["OUTBOX_LEASE_SECONDS"])


def _claim_next() -> Claim[OutboxMessage] | None:
    """Take the next due message for this worker (leases.py), or None when nothing is due;
    one whose worker died is due again once its lease runs out."""
    return claim_next(OutboxMessage, OutboxStatus.PENDING, lease())


def _settle(claim: Claim[OutboxMessage], **values: Any) -> bool:
    """Record the outcome, only while the claim is still ours (nobody re-claimed it)."""
    return settle(claim, OutboxStatus.PENDING, **values)


@dataclass
class DeliveryReport:
    sent: int = 0
    failed: int = 0


def deliver_due(limit: int = 500) -> DeliveryReport:
    """Send every due message (up to `limit`); failures are rescheduled with backoff."""
    report = DeliveryReport()
    for _ in range(limit):
        claim = _claim_next()
        if claim is None:
            break
        message = claim.row
        try:
            send_now(message, claim.deadline)
        except Exception as error:  # SMTP errors, refused connections, timeouts …
            report.failed += 1
            last_error = f"{type(error).__name__}: {error}"[:2000]
            outcome: dict[str, Any] = {"last_error": last_error}
            # A body no key opens waits for its key (OUTBOX_OLD_KEYS) however long it takes:
            # giving up would lose it, and the attempts say nothing about the SMTP server.
            if claim.attempt >= MAX_ATTEMPTS and not isinstance(error, UndecryptableBody):
                outcome["status"] = OutboxStatus.FAILED
            else:
                outcome["next_attempt_at"] = utcnow() + backoff(claim.attempt)
            log.warning(
                "mail %s (%s) not delivered, attempt %s: %s",
                message.id,
                message.template or "-",
                claim.attempt,
                last_error,
            )
            _settle(claim, **outcome)
        else:
            report.sent += 1
            log.info(
                "mail %s delivered: template=%s recipients=%d attempt=%d",
                message.id,
                message.template or "-",
                len(message.recipients),
                claim.attempt,
            )
            # The body (and any link in it) is not kept once delivered (API.md 9).
            _settle(claim, status=OutboxStatus.SENT, sent_at=utcnow(), body="")
    return report
