"""Retention and erasure (API.md 9): personal data is kept only as long as it is needed.

- `run_retention` (`flask retention run`, and the outbox worker once a day) redacts the
  submitter's details of votes older than `PII_RETENTION_DAYS`, deletes delivered and
  failed outbox rows older than `OUTBOX_RETENTION_DAYS`, audit entries older than
  `AUDIT_RETENTION_DAYS`, and drops one-time tokens and role offers that can no longer be
  used (a token keeps the address it was bound to).
- `erase` / `export` (`flask privacy erase|export EMAIL`) answer a data subject's request
  for every vote submitted with an address and every message held for it.
- `quotes_submitter`: a public reply to a vote may not publish its submitter's address or
  phone number (API.md 15).

Work is done in batches of `BATCH` rows, each its own short transaction, so a first run over
millions of old rows neither holds long locks nor meets the statement timeout.
"""

import logging
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import Select, delete, or_, select, type_coerce, update
from sqlalchemy.types import Text

from .models import (
    ApiToken,
    AuditEntry,
    OutboxMessage,
    OutboxStatus,
    RoleGrant,
    Token,
    Vote,
    turn_vote_revisions,
    utcnow,
)
from .platform.crypto import email_hashes, reencrypt
from .platform.email_addresses import normalize_email
from .platform.extensions import db
from .platform.output import schema_instance, timestamp_text
from .schemas.votes import SubjectVoteOut
from .vote_integrity import recount_votes
from .webhooks.events import deleted_in_bulk

log = logging.getLogger(__name__)

BATCH = 1000


@dataclass
class RetentionReport:
    votes_redacted: int = 0
    messages_deleted: int = 0
    tokens_deleted: int = 0
    audit_entries_deleted: int = 0

    def as_dict(self) -> dict[str, int]:
        """camelCase, as every JSON the service writes."""
        return {
            "votesRedacted": self.votes_redacted,
            "messagesDeleted": self.messages_deleted,
            "tokensDeleted": self.tokens_deleted,
            "auditEntriesDeleted": self.audit_entries_deleted,
        }


# A phone number is quoted when its last digits are: without its country or area code, a
# local number still reaches the person.
PHONE_DIGITS_QUOTED = 8
NOT_A_DIGIT = re.compile(r"\D")


def quotes_submitter(vote: Vote, text: str) -> bool:
    """Whether `text` contains the address of the vote's submitter (in any case) or their
    phone number (compared by its digits alone, whatever separates them in either)."""
    if vote.your_email and vote.your_email.casefold() in text.casefold():
        return True
    phone = NOT_A_DIGIT.sub("", vote.your_phone or "")[-PHONE_DIGITS_QUOTED:]
    return bool(phone) and phone in NOT_A_DIGIT.sub("", text)


def _in_batches(ids_stmt: Select, act: Any) -> int:
    """Run `act(ids)` on successive batches of the ids `ids_stmt` selects, committing each,
    until none is left; `act` must take the rows out of `ids_stmt`'s reach."""
    done = 0
    while ids := db.session.scalars(ids_stmt.limit(BATCH)).all():
        act(ids)
        db.session.commit()
        done += len(ids)
    return done


def run_retention(now: datetime | None = None) -> RetentionReport:
    now = now or utcnow()
    config = current_app.config
    report = RetentionReport()

    due = now - timedelta(days=config["PII_RETENTION_DAYS"])
    # Each batch is found oldest first, through an index on what it looks for
    # (bench/SCALE.md: EXPLAIN at a million rows), however few rows are due.
    redact_due = (
        select(Vote.id)
        .where(Vote.redacted_at.is_(None), Vote.created_at < due)
        .order_by(Vote.created_at)
    )

    def redact(ids: list) -> None:
        db.session.execute(
            update(Vote)
            .where(Vote.id.in_(ids))
            .values(your_name=None, your_email=None, your_phone=None, redacted_at=now)
            .execution_options(synchronize_session=False)
        )
        # Past the ORM: their locations' votes turn a revision here.
        locations = select(Vote.location_id).where(Vote.id.in_(ids)).distinct()
        turn_vote_revisions(db.session.connection(), locations)

    report.votes_redacted = _in_batches(redact_due, redact)
    # Where an API token was last used from is personal data too: kept as long as a vote's.
    db.session.execute(
        update(ApiToken)
        .where(ApiToken.last_used_ip.is_not(None), ApiToken.last_used_at < due)
        .values(last_used_ip=None)
        .execution_options(synchronize_session=False)
    )

    kept_until = now - timedelta(days=config["OUTBOX_RETENTION_DAYS"])
    sent = (
        select(OutboxMessage.id)
        .where(OutboxMessage.status == OutboxStatus.SENT, OutboxMessage.sent_at < kept_until)
        .order_by(OutboxMessage.sent_at)
    )
    # Failed, or held and never released: what the submitter wrote goes too.
    unsent = [
        select(OutboxMessage.id)
        .where(OutboxMessage.status == status, OutboxMessage.created_at < kept_until)
        .order_by(OutboxMessage.created_at)
        for status in (OutboxStatus.FAILED, OutboxStatus.HELD)
    ]
    for old_messages in (sent, *unsent):
        report.messages_deleted += _delete_in_batches(OutboxMessage, old_messages)

    for model in (Token, RoleGrant):  # one-time tokens, and role offers with theirs
        spent = select(model.id).where(or_(model.expires_at < now, model.used_at.is_not(None)))
        report.tokens_deleted += _delete_in_batches(model, spent)
    # A vote's receipt tokens (API.md 8, 15) once their 30 days are over; the vote stays.
    expired_receipts = (
        select(Vote.id).where(Vote.receipt_expires_at < now).order_by(Vote.receipt_expires_at)
    )
    report.tokens_deleted += _in_batches(
        expired_receipts,
        lambda ids: db.session.execute(
            update(Vote)
            .where(Vote.id.in_(ids))
            .values(receipt_token_hash=None, notice_token_hash=None, receipt_expires_at=None)
            .execution_options(synchronize_session=False)
        ),
    )

    old_entries = (
        select(AuditEntry.id)
        .where(AuditEntry.at < now - timedelta(days=config["AUDIT_RETENTION_DAYS"]))
        .order_by(AuditEntry.at)
    )
    report.audit_entries_deleted = _delete_in_batches(AuditEntry, old_entries)

    if any(asdict(report).values()):
        log.info("retention: %s", report.as_dict())
    return report


def _delete_in_batches(model: Any, ids_stmt: Select) -> int:
    return _in_batches(
        ids_stmt,
        lambda ids: db.session.execute(
            delete(model).where(model.id.in_(ids)).execution_options(synchronize_session=False)
        ),
    )


def _votes_of(email: str) -> Select:
    """Every vote submitted with `email`, redacted ones included: each keeps the hash of its
    address (set with the address; migration 0010 hashed older votes)."""
    return select(Vote).where(Vote.email_hash.in_(email_hashes(email)))


def _messages_of(email: str) -> list[OutboxMessage]:
    """Messages to `email`, or on its behalf (a btob/btoc submission replies to it).

    Recipients are a JSON list, which the databases search differently; the outbox holds
    what OUTBOX_RETENTION_DAYS leaves of it, and this reads only the address columns.
    """
    wanted = normalize_email(email)
    found = []
    rows = db.session.execute(
        select(OutboxMessage.id, OutboxMessage.recipients, OutboxMessage.reply_to)
    )
    for message_id, recipients, reply_to in rows:
        addresses = [*(recipients or []), *([reply_to] if reply_to else [])]
        if any(normalize_email(address) == wanted for address in addresses):
            found.append(message_id)
    if not found:
        return []
    return list(
        db.session.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.id.in_(found))
            .order_by(OutboxMessage.created_at, OutboxMessage.id)
        )
    )


def export(email: str) -> dict[str, Any]:
    """Every vote and message held for `email`, as the staff see them."""
    votes = db.session.scalars(_votes_of(email).order_by(Vote.created_at, Vote.id)).all()
    return {
        "email": email,
        "votes": schema_instance(SubjectVoteOut, many=True).dump(votes),
        "messages": [
            {
                "id": str(message.id),
                "template": message.template,
                "recipients": message.recipients,
                "replyTo": message.reply_to,
                "subject": message.subject,
                "body": message.body or None,
                "status": message.status.value,
                "createdAt": timestamp_text(message.created_at),
                "sentAt": timestamp_text(message.sent_at),
            }
            for message in _messages_of(email)
        ],
    }


def erase(email: str) -> dict[str, int]:
    """Delete every vote submitted with `email` and every message to or for it."""
    votes = db.session.execute(
        _votes_of(email).with_only_columns(Vote.id, Vote.employer_id, Vote.location_id)
    ).all()
    vote_ids = [vote.id for vote in votes]
    # Deleting an original releases its duplicates (ON DELETE SET NULL): they count again.
    employers = {vote.employer_id for vote in votes} | set(
        db.session.scalars(select(Vote.employer_id).where(Vote.duplicate_of_id.in_(vote_ids)))
    )
    message_ids = [message.id for message in _messages_of(email)]
    # Receivers that mirror votes hear of them going (the deletes below pass by the session).
    deleted_in_bulk(db.session(), Vote, ((vote.id, vote.location_id) for vote in votes))
    for model, ids in ((Vote, vote_ids), (OutboxMessage, message_ids)):
        for start in range(0, len(ids), BATCH):
            db.session.execute(
                delete(model)
                .where(model.id.in_(ids[start : start + BATCH]))
                .execution_options(synchronize_session=False)
            )
    # Bulk deletes pass by the stored counts (and revisions; duplicates released by the
    # deletes are votes of the same locations): count those employers' and locations' votes
    # again.
    recount_votes(
        {employer_id for employer_id in employers if employer_id is not None},
        {vote.location_id for vote in votes},
    )
    db.session.commit()
    log.info("privacy erase: %d votes, %d messages", len(vote_ids), len(message_ids))
    return {"votes": len(vote_ids), "messages": len(message_ids)}


def rekey_outbox() -> dict[str, int]:
    """Re-encrypt every kept body under the current key (after OUTBOX_KEY changed)."""
    raw = type_coerce(OutboxMessage.body, Text)  # the stored ciphertext, not decrypted
    rows = db.session.execute(select(OutboxMessage.id, raw).where(raw != "")).all()
    done = unreadable = 0
    for message_id, token in rows:
        fresh = reencrypt(token)
        if fresh is None:
            unreadable += 1
            continue
        # Only if the body is still the one read: a message delivered meanwhile stays empty.
        done += db.session.execute(
            update(OutboxMessage)
            .where(OutboxMessage.id == message_id, raw == token)
            .values({OutboxMessage.__table__.c.body: type_coerce(fresh, Text)})
            .execution_options(synchronize_session=False)
        ).rowcount
    db.session.commit()
    return {"reencrypted": done, "unreadable": unreadable}
