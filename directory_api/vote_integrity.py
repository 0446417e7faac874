"""Vote integrity (API.md 8): receipts that confirm or withdraw an employer vote, duplicates,
and the per-employer counts the public results read.

- A receipt carries one token per vote (kept as its SHA-256, valid 30 days) for both links,
  confirm and withdraw. The first reply to a confirmed vote mails its submitter a withdraw
  link (`send_reply_notice`): the receipt's token cannot be rebuilt from its hash, so the
  notice gets a token of its own, the receipt's stays valid, and both live 30 days more.
  An address gets at most `VOTE_RECEIPTS_PER_ADDRESS` receipts per rolling 24 hours,
  counted on its keyed hash (the normalised address, as every per-address rule): past that
  the vote is kept, with no receipt and so no token.
- A vote whose address already voted for the same employer at the location (or, with no
  employer linked, for the same case-folded business name) points at the earliest such vote
  (`duplicate_of_id`). Deleting a vote (withdrawal, staff) hands that role to the next one.
- `Listing.vote_count` holds an employer's active, non-duplicate votes. Every change to a
  vote through the ORM keeps it (mapper events below); `recount_votes` restores it after
  bulk statements (erasure) or by hand (`flask votes recount`).
"""

import hmac
import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from flask import current_app
from sqlalchemy import Connection, bindparam, func, inspect, select, update

from .credentials import new_token, presented_hash
from .models import Listing, Location, Vote, VoteType, utcnow
from .platform.errors import abort
from .platform.extensions import db
from .platform.outbox import forget_messages_about, queue_mail

RECEIPT_LIFETIME = timedelta(days=30)
RECEIPT_WINDOW = timedelta(hours=24)


# Receipts ---------------------------------------------------------------------------------


def receipts_sent_recently(address_hash: str, up_to: int) -> int:
    """Receipts mailed to this (normalised) address in the last 24 hours, counted up to
    `up_to`: votes that got a token. A withdrawn vote is gone and no longer counts; nothing
    else frees the allowance. Counting stops at `up_to` (the allowance), along the
    address's index from the window's start, where the day's receipts are: an address
    that voted thousands of times costs no more than one that voted a few."""
    values = {"address": address_hash, "since": utcnow() - RECEIPT_WINDOW, "up_to": up_to}
    return db.session.scalar(RECEIPTS_SINCE, values)


# Built once (not for every vote, with its cache key), its values bound.
_receipts = (
    select(Vote.id)
    .where(
        Vote.email_hash == bindparam("address"),
        Vote.created_at > bindparam("since"),
        Vote.receipt_token_hash.is_not(None),
    )
    .limit(bindparam("up_to"))
)
RECEIPTS_SINCE = select(func.count()).select_from(_receipts.subquery())


def send_receipt(vote: Vote, location: Location, address: str) -> bool:
    """Give `vote` its token and queue its receipt to `address` (as the voter typed it: the
    vote stores its one spelling, and its keyed hash, which the allowance counts on),
    unless that address had its allowance. Call before the vote has a token."""
    cap = current_app.config["VOTE_RECEIPTS_PER_ADDRESS"]
    if cap <= 0 or receipts_sent_recently(vote.email_hash, cap) >= cap:
        return False
    token, vote.receipt_token_hash = new_token()
    vote.receipt_expires_at = utcnow() + RECEIPT_LIFETIME
    vote.id = vote.id or uuid.uuid4()  # named by its receipt before its first flush
    queue_mail(
        address, "vote_receipt", about=about(vote), vote=vote, location=location, token=token
    )
    return True


def send_reply_notice(vote: Vote, location: Location) -> bool:
    """Mail the vote's first reply to its submitter, with a withdraw link: once per vote,
    and only to a confirmed submitter whose address is still held (not redacted)."""
    if not vote.confirmed or vote.your_email is None or vote.notice_token_hash is not None:
        return False
    token, vote.notice_token_hash = new_token()
    vote.receipt_expires_at = max(vote.receipt_expires_at or utcnow(), utcnow() + RECEIPT_LIFETIME)
    queue_mail(
        vote.your_email, "vote_reply", about=about(vote), vote=vote, location=location, token=token
    )
    return True


def about(vote: Vote) -> str:
    """How the outbox names a vote's messages, which go with it."""
    return f"vote:{vote.id}"


def locked(criteria: Any) -> Vote | None:
    """The vote matching `criteria`, locked until the transaction ends and read afresh, so
    two requests changing one vote (two moderators, a withdrawal racing a deletion) take
    turns and each sees what the other did: the stored counts follow exactly."""
    return db.session.scalar(
        select(Vote).where(criteria).with_for_update().execution_options(populate_existing=True)
    )


def vote_by_receipt(token: str) -> Vote:
    """The vote a live receipt token names, locked for the change; 404 when the token is
    unknown or expired (or its vote withdrawn)."""
    token_hash = presented_hash(token)
    vote = None
    if token_hash is not None:
        named = (Vote.receipt_token_hash == token_hash) | (Vote.notice_token_hash == token_hash)
        vote = locked(named & (Vote.receipt_expires_at > utcnow()))
    if vote is None or not any(
        hmac.compare_digest(stored or "", token_hash or "")
        for stored in (vote.receipt_token_hash, vote.notice_token_hash)
    ):
        abort(404, "This receipt link is invalid or expired.")
    return vote


def confirm(vote: Vote) -> None:
    """Confirmed from now on; confirming again changes nothing (the first time stays)."""
    if not vote.confirmed:
        vote.confirmed, vote.confirmed_at = True, utcnow()


# Duplicates -------------------------------------------------------------------------------


def employer_of(vote: Vote) -> uuid.UUID | None:
    """The employer `vote` is linked to, also before its first flush."""
    return vote.employer.id if vote.employer is not None else vote.employer_id


def earliest_same_vote(vote: Vote) -> uuid.UUID | None:
    """The id of the earliest other employer vote from `vote`'s address at its location
    for what `vote` is for: its employer, or with none linked, the same business name
    (case-folded).

    The first match is found in the database along the address's index, so one address
    with thousands of votes costs no more than one with a few.
    """
    if vote.email_hash is None:
        return None
    values = {"location_id": vote.location_id, "address": vote.email_hash, "vote_id": vote.id}
    employer = employer_of(vote)
    if employer is not None:
        return db.session.scalar(EARLIEST_FOR_EMPLOYER, {**values, "employer_id": employer})
    # Names compare case-folded, which SQL's lower() is not (ß, ﬁ): compared here, in order.
    name = vote.business_name.casefold()
    unlinked = db.session.execute(EARLIER_UNLINKED, values)
    return next((other.id for other in unlinked if other.business_name.casefold() == name), None)


# Built once, their values bound: the earlier votes of an address at a location.
_earlier = (
    select(Vote.id)
    .where(
        Vote.location_id == bindparam("location_id"),
        Vote.email_hash == bindparam("address"),
        Vote.type == VoteType.EMPLOYER,
        Vote.id.is_distinct_from(bindparam("vote_id")),  # None before its first flush
    )
    .order_by(Vote.created_at, Vote.id)
)
EARLIEST_FOR_EMPLOYER = _earlier.where(Vote.employer_id == bindparam("employer_id")).limit(1)
EARLIER_UNLINKED = _earlier.add_columns(Vote.business_name).where(Vote.employer_id.is_(None))


def mark_duplicate(vote: Vote) -> None:
    """Point `vote` at the earliest earlier vote from its address for the same target.

    Call before the vote is first flushed: it is counted in its employer's results (or not)
    with this already set.
    """
    with db.session.no_autoflush:
        vote.duplicate_of_id = earliest_same_vote(vote)


def delete_vote(vote: Vote) -> None:
    """Delete `vote` (and its personal data); its duplicates point at the earliest of them,
    which stops being one."""
    followers = list(
        db.session.scalars(
            select(Vote).where(Vote.duplicate_of_id == vote.id).order_by(Vote.created_at, Vote.id)
        )
    )
    if followers:
        first, *rest = followers
        first.duplicate_of_id = None
        for other in rest:
            other.duplicate_of_id = first.id
        db.session.flush()
    forget_messages_about(about(vote))  # its receipt holds the voter's address
    db.session.delete(vote)


# Stored counts ----------------------------------------------------------------------------

COUNTED_FIELDS = ("type", "active", "employer_id", "duplicate_of_id")


def counted_employer(values: dict[str, Any]) -> uuid.UUID | None:
    """The employer a vote with these values counts for in the results, if any."""
    if (
        values["type"] == VoteType.EMPLOYER
        and values["active"]
        and values["duplicate_of_id"] is None
    ):
        return values["employer_id"]
    return None


def _values(vote: Vote, *, before: bool) -> dict[str, Any]:
    state = inspect(vote)
    values = {}
    for name in COUNTED_FIELDS:
        history = state.attrs[name].history
        # The columns keep their old value when changed (active_history), so `deleted` has it.
        values[name] = history.deleted[0] if before and history.deleted else getattr(vote, name)
    return values


def _apply(connection: Connection, changes: Counter) -> None:
    listings = Listing.__table__
    for employer_id, delta in changes.items():
        if employer_id is not None and delta:
            connection.execute(
                update(listings)
                .where(listings.c.id == employer_id)
                # A count is not an edit of the employer: its updatedAt stays.
                .values(vote_count=listings.c.vote_count + delta, updated_at=listings.c.updated_at)
            )


def _count_inserted(_mapper: Any, connection: Connection, vote: Vote) -> None:
    _apply(connection, Counter({counted_employer(_values(vote, before=False)): 1}))


def _count_updated(_mapper: Any, connection: Connection, vote: Vote) -> None:
    changes = Counter({counted_employer(_values(vote, before=False)): 1})
    changes.subtract({counted_employer(_values(vote, before=True)): 1})
    _apply(connection, changes)


def _count_deleted(_mapper: Any, connection: Connection, vote: Vote) -> None:
    changes: Counter = Counter()
    changes.subtract({counted_employer(_values(vote, before=True)): 1})
    _apply(connection, changes)


# Registered by create_app (events.py): the employers' stored counts, in the change's flush.
LISTENERS = (
    (Vote, "after_insert", _count_inserted, {}),
    (Vote, "after_update", _count_updated, {}),
    (Vote, "after_delete", _count_deleted, {}),
)


def recount_votes(employer_ids: Iterable[uuid.UUID] | None = None) -> None:
    """Set `vote_count` from the votes (of these employers, or of all): after bulk deletes."""
    counted = (
        select(func.count())
        .select_from(Vote)
        .where(
            Vote.employer_id == Listing.id,
            Vote.type == VoteType.EMPLOYER,
            Vote.active.is_(True),
            Vote.duplicate_of_id.is_(None),
        )
        .scalar_subquery()
    )
    stmt = (
        update(Listing)
        .where(Listing.kind == "employer")
        .values(vote_count=counted, updated_at=Listing.updated_at)
    )
    if employer_ids is not None:
        stmt = stmt.where(Listing.id.in_(list(employer_ids)))
    db.session.execute(stmt.execution_options(synchronize_session=False))
