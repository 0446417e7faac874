"""Vote integrity (API.md 8, 17): receipts that confirm or withdraw an employer vote,
duplicates, the stored counts the public results and the moderation summary read, and the
screening of public submissions (proof of work, time trap and honeypot).

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
- Counts are stored, not counted per request: an employer's active, non-duplicate votes
  (`Listing.vote_count`, the results) and its active and pending ones, and per location
  the summary's figures (`VoteRevision`). Every flush that changes votes through the ORM
  keeps them (`keep_counts`, in its transaction); `recount_votes` restores them after
  bulk statements (erasure, a bulk load) or by hand (`flask listings recount`).
"""

import hmac
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flask import current_app
from sqlalchemy import Select, bindparam, func, inspect, select, update
from sqlalchemy.orm import Session

from .credentials import new_token, presented_hash
from .models import Employer, Listing, Location, Vote, VoteRevision, VoteType, utcnow
from .models.listing import new_revision
from .models.vote import TALLIES, turn_vote_revisions
from .platform.crypto import email_hashes, keys_for
from .platform.errors import abort, invalid
from .platform.extensions import db
from .platform.outbox import forget_messages_about, queue_mail
from .platform.proof_of_work import Refused, Solution, create_challenge, verify
from .platform.single_use import StoreUnavailable, use_once
from .platform.with_commit import WAITS

log = logging.getLogger(__name__)

RECEIPT_LIFETIME = timedelta(days=30)
RECEIPT_WINDOW = timedelta(hours=24)


# Receipts ---------------------------------------------------------------------------------


def receipts_sent_recently(address_hashes: list[str], up_to: int) -> int:
    """Receipts mailed to this (normalised) address in the last 24 hours, counted up to
    `up_to`: votes that got a token. A withdrawn vote is gone and no longer counts; nothing
    else frees the allowance. Counting stops at `up_to` (the allowance), along the index
    of the address's receipts from the window's start (migration 0027): an address that
    voted thousands of times without one costs no more than one that voted a few."""
    values = {"since": utcnow() - RECEIPT_WINDOW, "up_to": up_to, **addressed(address_hashes)}
    return db.session.scalar(RECEIPTS_SINCE[len(address_hashes) > 1], values)


# An address's votes: by its one hash, or (while a secret key is rotated) by any of its
# hashes; each statement below is built in both forms, indexed by "several hashes?".
BY_ADDRESS = (
    Vote.email_hash == bindparam("address"),
    Vote.email_hash.in_(bindparam("addresses", expanding=True)),
)


def addressed(hashes: list[str]) -> dict[str, Any]:
    """The values of BY_ADDRESS's criterion for `hashes`."""
    return {"addresses": hashes} if len(hashes) > 1 else {"address": hashes[0]}


def address_hashes(vote: Vote) -> list[str]:
    """The hashes the earlier votes of `vote`'s address may hold (its typed address
    gives them all; once redacted, its own is all there is)."""
    return email_hashes(vote.your_email) if vote.your_email else [vote.email_hash]


# Built once (not for every vote, with its cache key), its values bound. The receipts'
# index by address and time (migration 0027) holds only receipts, in this order: the
# count reads at most `up_to` of its entries. The ORDER BY bounds PostgreSQL's other
# choice: for an address holding many of the votes it expects the receipts among the
# first rows of any scan, and without an order it read the table under the LIMIT (all of
# it when there are none); with it, the day's votes by time, until autovacuum has marked
# the table's pages visible and the index alone answers (tests/test_vote_integrity.py).
RECEIPTS_SINCE = tuple(
    select(func.count()).select_from(
        select(Vote.id)
        .where(
            by_address,
            Vote.created_at > bindparam("since"),
            Vote.receipt_token_hash.is_not(None),
        )
        .order_by(Vote.created_at)
        .limit(bindparam("up_to"))
        .subquery()
    )
    for by_address in BY_ADDRESS
)


def send_receipt(
    vote: Vote,
    location: Location,
    address: str,
    history: "AddressHistory | None" = None,
    employer: "NamedEmployer | Employer | None" = None,
) -> bool:
    """Give `vote` its token and queue its receipt to `address` (as the voter typed it: the
    vote stores its one spelling, and its keyed hash, which the allowance counts on),
    unless that address had its allowance (its `history`, when read already). The receipt
    names the vote's `employer`. Call before the vote has a token."""
    cap = current_app.config["VOTE_RECEIPTS_PER_ADDRESS"]
    if cap <= 0:
        return False
    sent = (
        receipts_sent_recently(address_hashes(vote), cap) if history is None else history.receipts
    )
    if sent >= cap:
        return False
    token, vote.receipt_token_hash = new_token()
    vote.receipt_expires_at = utcnow() + RECEIPT_LIFETIME
    vote.id = vote.id or uuid.uuid4()  # named by its receipt before its first flush
    queue_mail(
        address,
        "vote_receipt",
        about=about(vote),
        employer=employer,
        location=location,
        token=token,
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


def location_mail(location: Location) -> str:
    """How the outbox names a location's business votes' mail: its held ones are listed by
    it, and they go with the location."""
    return f"location:{location.id}"


def about(vote: Vote) -> str:
    """How the outbox names a vote's messages, which go with it."""
    return f"vote:{vote.id}"


def locked(criteria: Any, limit: int | None = 1, *, lock: bool = True) -> list[Vote]:
    """The votes matching `criteria` (up to `limit`), locked until the transaction ends and
    read afresh, so two requests changing one vote (two moderators, a withdrawal racing a
    deletion) take turns and each sees what the other did: the stored counts follow
    exactly. Locked in one order (creation, then id: along the location's index), so two
    requests locking many wait for each other in turn, not in a circle. Without `lock` (a
    dry run) they are only read afresh."""
    stmt = select(Vote).where(criteria).order_by(Vote.created_at, Vote.id).limit(limit)
    if lock:
        stmt = stmt.with_for_update()
    return list(db.session.scalars(stmt.execution_options(populate_existing=True)))


def locked_vote(criteria: Any) -> Vote | None:
    """The vote matching `criteria`, locked (as `locked`)."""
    return next(iter(locked(criteria)), None)


def vote_by_receipt(token: str) -> Vote:
    """The vote a live receipt token names, locked for the change; 404 when the token is
    unknown or expired (or its vote withdrawn)."""
    token_hash = presented_hash(token)
    vote = None
    if token_hash is not None:
        named = (Vote.receipt_token_hash == token_hash) | (Vote.notice_token_hash == token_hash)
        vote = locked_vote(named & (Vote.receipt_expires_at > utcnow()))
    if vote is None or not any(
        hmac.compare_digest(stored or "", token_hash or "")
        for stored in (vote.receipt_token_hash, vote.notice_token_hash)
    ):
        abort(404, "This receipt link is invalid or expired.")
    return vote


def refuse_unconfirmed_activation(activated: Iterable[Vote]) -> None:
    """Under VOTE_REQUIRE_CONFIRMATION, 409 naming the votes about to be activated that
    their submitters have not confirmed (API.md 8, 15)."""
    if not current_app.config["VOTE_REQUIRE_CONFIRMATION"]:
        return
    unconfirmed = sorted(str(vote.id) for vote in activated if not vote.confirmed)
    if unconfirmed:
        abort(
            409,
            "These votes are not confirmed by their submitters yet; they cannot be activated: "
            f"{', '.join(unconfirmed)}.",
            ids=unconfirmed,
        )


def confirm(vote: Vote) -> None:
    """Confirmed from now on; confirming again changes nothing (the first time stays)."""
    if not vote.confirmed:
        vote.confirmed, vote.confirmed_at = True, utcnow()


# Proof of work (API.md 17) ---------------------------------------------------------------


def challenge_keys() -> list[bytes]:
    """The keys challenges are signed with: from SECRET_KEY, then from its fallbacks (a
    challenge issued before a rotation is still solved), derived once per app."""
    extensions = current_app.extensions
    if "vote_challenge_keys" not in extensions:
        extensions["vote_challenge_keys"] = keys_for(current_app, "vote challenge")
    return extensions["vote_challenge_keys"]


def challenge_key() -> bytes:
    """The key new challenges are signed with."""
    return challenge_keys()[0]


def new_challenge(location: Location) -> dict[str, Any]:
    """A challenge for a submission to `location`, valid 10 minutes."""
    max_number = current_app.config["VOTE_CHALLENGE_MAX_NUMBER"]
    return create_challenge(challenge_key(), {"location": location.slug}, max_number)


def solved_for(location: Location, payload: Any) -> Solution:
    """The unused solution of a challenge for `location` that `payload` carries, now used;
    `Refused` otherwise."""
    if payload is None:
        raise Refused(
            "Solve a challenge (GET /locations/<slug>/votes/challenge) and send its solution."
        )
    solution = verify(payload, challenge_keys())
    if solution.params.get("location") != location.slug:
        raise Refused("The challenge was for another location.")
    if not use_once(solution.challenge, solution.expires):  # 64 hex digits: its own name
        raise Refused("This solution was used already: solve a new challenge.")
    return solution


def screen_submission(location: Location, data: dict[str, Any]) -> bool:
    """Check a public submission's proof of work as `VOTE_CHALLENGE` says (off: not at all;
    log: count and log what fails; required: 422 on `altcha` for it); whether to hold it:
    solved faster than `VOTE_MIN_FILL_SECONDS` after its challenge was issued, with the
    honeypot filled. Takes both fields out of `data`."""
    payload, honeypot = data.pop("altcha", None), data.pop("website", None)
    mode = current_app.config["VOTE_CHALLENGE"]
    if mode == "off":
        return False
    try:
        solution = solved_for(location, payload)
    except Refused as refused:
        log.warning("vote challenge (%s) at %s: %s", mode, location.slug, refused.reason)
        if mode == "required":
            invalid("altcha", refused.reason)
        return False
    except StoreUnavailable as error:  # no telling whether it was used: refused unless log
        if mode == "required":
            raise
        log.warning("vote challenge (log) at %s unchecked: %s", location.slug, error)
        return False
    fill_time = (utcnow() - solution.issued).total_seconds()
    held = bool(honeypot) and fill_time < current_app.config["VOTE_MIN_FILL_SECONDS"]
    if held:
        log.warning("vote at %s held: honeypot filled, %.1fs to solve", location.slug, fill_time)
    return held


# Duplicates -------------------------------------------------------------------------------


def employer_of(vote: Vote) -> uuid.UUID | None:
    """The employer `vote` is linked to, also before its first flush."""
    return vote.employer.id if vote.employer is not None else vote.employer_id


def earliest_same_vote(vote: Vote) -> uuid.UUID | None:
    """The id of the earliest other employer vote from `vote`'s address at its location
    for what `vote` is for: its employer, or with none linked, the same business name
    (case-folded).

    For an employer, the match is the first entry of the address-and-employer index
    (migration 0026), so one address with thousands of votes for it costs no more than
    one with a few; without one, the address's earlier unlinked votes are each compared.
    """
    if vote.email_hash is None:
        return None
    hashes = address_hashes(vote)
    several = len(hashes) > 1
    values = {"location_id": vote.location_id, "vote_id": vote.id, **addressed(hashes)}
    employer = employer_of(vote)
    if employer is not None:
        return db.session.scalar(
            EARLIEST_FOR_EMPLOYER[several], {**values, "employer_id": employer}
        )
    # Names compare case-folded, which SQL's lower() is not (ß, ﬁ): compared here, in order.
    name = vote.business_name.casefold()
    unlinked = db.session.execute(EARLIER_UNLINKED[several], values)
    return next((other.id for other in unlinked if other.business_name.casefold() == name), None)


# Built once, their values bound: the earlier votes of an address at a location, in no
# order yet (each use below orders them).
_earlier = tuple(
    select(Vote.id).where(
        Vote.location_id == bindparam("location_id"),
        by_address,
        Vote.type == VoteType.EMPLOYER,
        Vote.id.is_distinct_from(bindparam("vote_id")),  # None before its first flush
    )
    for by_address in BY_ADDRESS
)


def _earliest_for(earlier: Select, employer: Any) -> Select:
    """The first of `earlier` for `employer` (a bound value or a column), by time.

    The employer is matched as a range of one value, and ordered by first: matched by `=`,
    PostgreSQL drops it from the order, and an index by time alone (the location's, the
    table's) may serve the LIMIT, walking all the location's votes for an address that
    has none for this employer (tests/test_vote_integrity.py, the flooding address). So
    ordered, for one address hash, only 0026's index (address, employer, time) gives the
    order; for several (a key being rotated), their entries for the employer are sorted."""
    return (
        earlier.where(Vote.employer_id.between(employer, employer))
        .order_by(Vote.employer_id, Vote.created_at, Vote.id)
        .limit(1)
    )


EARLIEST_FOR_EMPLOYER = tuple(
    _earliest_for(earlier, bindparam("employer_id")) for earlier in _earlier
)
EARLIER_UNLINKED = tuple(
    earlier.add_columns(Vote.business_name)
    .where(Vote.employer_id.is_(None))
    .order_by(Vote.created_at, Vote.id)
    for earlier in _earlier
)


def mark_duplicate(vote: Vote, history: "AddressHistory | None" = None) -> None:
    """Point `vote` at the earliest earlier vote from its address for the same target (its
    `history`, when read already with its employer).

    Call before the vote is first flushed: it is counted in its employer's results (or not)
    with this already set.
    """
    if history is not None:
        vote.duplicate_of_id = history.earliest
        return
    with db.session.no_autoflush:
        vote.duplicate_of_id = earliest_same_vote(vote)


@dataclass(frozen=True, slots=True)
class NamedEmployer:
    """What a new vote and its receipt use of the employer it names (read as columns)."""

    id: uuid.UUID
    slug: str
    name: str


@dataclass(frozen=True, slots=True)
class AddressHistory:
    """What a voter's address did before, read in the statement that finds the employer its
    new vote is for (`history_columns`): its earliest vote for that employer at the
    location (the new one's original, if any), and its receipts of the last 24 hours,
    counted up to the allowance."""

    earliest: uuid.UUID | None
    receipts: int


def history_columns(employer: Any, several: bool) -> tuple[Any, Any]:
    """An address's `AddressHistory` as two columns of a statement that reads `employer` (a
    column), by its one hash or by `several`; bound by `history_values`."""
    return (
        _earliest_for(_earlier[several], employer).scalar_subquery(),
        RECEIPTS_SINCE[several].scalar_subquery(),
    )


def history_values(address: str, location_id: uuid.UUID) -> tuple[bool, dict[str, Any]]:
    """Whether `address` has several hashes (a key being rotated), and the values that
    `history_columns` are bound by for a new vote from it at the location."""
    hashes = email_hashes(address)
    return len(hashes) > 1, {
        "location_id": location_id,
        "vote_id": None,  # the new vote: no row yet
        "since": utcnow() - RECEIPT_WINDOW,
        "up_to": max(current_app.config["VOTE_RECEIPTS_PER_ADDRESS"], 0),
        **addressed(hashes),
    }


def delete_votes(votes: list[Vote]) -> None:
    """Delete `votes` (and their personal data); the duplicates of each that stay point at
    the earliest of them, which stops being one."""
    if not votes:
        return
    gone = [vote.id for vote in votes]
    # Locked and read afresh like the votes (another moderator may be changing one), in
    # their order of creation: the first of each group is its earliest.
    followers = locked(Vote.duplicate_of_id.in_(gone) & Vote.id.not_in(gone), limit=None)
    earliest: dict[uuid.UUID, Vote] = {}
    for follower in followers:
        first = earliest.setdefault(follower.duplicate_of_id, follower)
        follower.duplicate_of_id = None if first is follower else first.id
    if followers:
        db.session.flush()
    forget_messages_about(*(about(vote) for vote in votes))  # receipts hold addresses
    for vote in votes:
        db.session.delete(vote)


def delete_vote(vote: Vote) -> None:
    delete_votes([vote])


# Stored counts ----------------------------------------------------------------------------

# What each vote adds to the counts its location (VoteRevision) and its employer (Listing)
# keep: each count's rule as the rows say it (for recounts) and as a flush sees a vote's
# values (to keep it), side by side so they stay one rule.
LOCATION_COUNTS: dict[str, tuple[Any, Callable[[dict[str, Any]], bool]]] = {
    "pending": (Vote.active.is_(False), lambda v: not v["active"]),
    "active": (Vote.active.is_(True), lambda v: v["active"]),
    "unconfirmed": (Vote.confirmed.is_(False), lambda v: not v["confirmed"]),
    "duplicates": (Vote.duplicate_of_id.is_not(None), lambda v: v["duplicate_of_id"] is not None),
    "unanswered": (
        Vote.active.is_(True) & Vote.reply_body.is_(None),
        lambda v: v["active"] and v["reply_body"] is None,
    ),
    "suspect": (Vote.suspect.is_(True), lambda v: v["suspect"]),
}
EMPLOYER_COUNTS: dict[str, tuple[Any, Callable[[dict[str, Any]], bool]]] = {
    # The public results: active, non-duplicate employer votes.
    "vote_count": (
        (Vote.type == VoteType.EMPLOYER) & Vote.active.is_(True) & Vote.duplicate_of_id.is_(None),
        lambda v: v["type"] == VoteType.EMPLOYER and v["active"] and v["duplicate_of_id"] is None,
    ),
    "active_votes": LOCATION_COUNTS["active"],
    "pending_votes": LOCATION_COUNTS["pending"],
}
assert set(LOCATION_COUNTS) == set(TALLIES)
COUNTED_FIELDS = (
    "location_id",
    "type",
    "active",
    "confirmed",
    "employer_id",
    "duplicate_of_id",
    "reply_body",
    "suspect",
)


def _values(vote: Vote, *, before: bool) -> dict[str, Any]:
    """The counted fields of `vote` as this flush wrote them, or as they were before it."""
    if not before:
        return {name: getattr(vote, name) for name in COUNTED_FIELDS}
    state = inspect(vote)
    values = {}
    for name in COUNTED_FIELDS:
        history = state.attrs[name].history
        # The counted columns keep their old value when changed (active_history), so
        # `deleted` has it (the location and the type never change).
        values[name] = history.deleted[0] if history.deleted else getattr(vote, name)
    return values


def _add(totals: dict[Any, Counter], key: Any, counts: dict, values: dict, sign: int) -> None:
    counter = totals.setdefault(key, Counter())
    for name, (_, counts_it) in counts.items():
        counter[name] += sign if counts_it(values) else 0


def keep_counts(session: Session, _context: object) -> None:
    """After a flush that added, changed or deleted votes: their locations' revisions turn
    and their counts (and their employers') change by what the flush did, in the flush's
    transaction, in two statements whatever the number of votes."""
    locations: dict[Any, Counter] = {}
    employers: dict[Any, Counter] = {}
    for rows, before, after in (
        (session.new, False, True),
        (session.dirty, True, True),
        (session.deleted, True, False),
    ):
        for vote in rows:
            if not isinstance(vote, Vote):
                continue
            locations.setdefault(vote.location_id, Counter())
            for sign, counted in ((1, after), (-1, before)):
                if counted:
                    values = _values(vote, before=sign < 0)
                    _add(locations, values["location_id"], LOCATION_COUNTS, values, sign)
                    if values["employer_id"] is not None:
                        _add(employers, values["employer_id"], EMPLOYER_COUNTS, values, sign)
    if not locations:
        return
    connection = session.connection()
    changes = {key: {name: counter[name] for name in TALLIES} for key, counter in locations.items()}
    turn_vote_revisions(connection, locations, changes)
    changed = [
        {"employer": key, **{f"add_{name}": counter[name] for name in EMPLOYER_COUNTS}}
        for key, counter in sorted(employers.items())  # in one order: no deadlocks
        if any(counter.values())
    ]
    if changed:
        connection.execute(ADD_TO_EMPLOYER, changed)


_listings = Listing.__table__
# Built once, its values bound: an employer's counts change by what a flush did.
ADD_TO_EMPLOYER = (
    update(_listings)
    .where(_listings.c.id == bindparam("employer"))
    # A count is not an edit of the employer: its updatedAt stays.
    .values(
        updated_at=_listings.c.updated_at,
        **{name: _listings.c[name] + bindparam(f"add_{name}") for name in EMPLOYER_COUNTS},
    )
    .execution_options(**WAITS)  # nothing reads how many rows it changed
)

# Registered by create_app (events.py): the counts and revisions, in the change's flush.
LISTENERS = ((Session, "after_flush", keep_counts, {}),)


def _counted(criteria: Any, of: Any) -> Any:
    return select(func.count()).select_from(Vote).where(of, criteria).scalar_subquery()


def recount_votes(
    employer_ids: Iterable[uuid.UUID] | None = None,
    location_ids: Iterable[uuid.UUID] | None = None,
) -> None:
    """Set the stored counts from the votes, of these employers and locations (or all):
    after bulk statements that pass by the ORM (erasure, a bulk load) or by hand.

    The rows are locked first, in the order a flush changes them (locations, then
    employers; each table by id), and counted in a statement after that: a transaction
    changing a vote meanwhile has either committed (and is counted) or adds its change
    after this one commits. Counting in the statement that waits for its lock would count
    with the snapshot from before the wait, and overwrite that change (PostgreSQL's READ
    COMMITTED)."""
    # Every location with votes gets its row (a bulk load may have passed by it), and the
    # recounted rows a new revision: their votes changed behind the ORM's back.
    if location_ids is None:
        with_votes = select(Vote.location_id).where(Vote.location_id.is_not(None)).distinct()
        turn_vote_revisions(db.session.connection(), with_votes)
        summaries = VoteRevision.location_id.is_not(None)
    else:
        location_ids = set(location_ids)
        turn_vote_revisions(db.session.connection(), location_ids)
        summaries = VoteRevision.location_id.in_(location_ids)
    db.session.execute(
        select(VoteRevision.location_id)
        .where(summaries)
        .order_by(VoteRevision.location_id)
        .with_for_update()
    )
    db.session.execute(
        update(VoteRevision)
        .where(summaries)
        .values(
            revision=new_revision(),
            **{
                name: _counted(criteria, Vote.location_id == VoteRevision.location_id)
                for name, (criteria, _) in LOCATION_COUNTS.items()
            },
        )
        .execution_options(synchronize_session=False)
    )

    employers = Listing.kind == "employer"
    if employer_ids is not None:
        employers &= Listing.id.in_(list(employer_ids))
    db.session.execute(select(Listing.id).where(employers).order_by(Listing.id).with_for_update())
    db.session.execute(
        update(Listing)
        .where(employers)
        .values(
            updated_at=Listing.updated_at,
            **{
                name: _counted(criteria, Vote.employer_id == Listing.id)
                for name, (criteria, _) in EMPLOYER_COUNTS.items()
            },
        )
        .execution_options(synchronize_session=False)
    )
