"""/locations/:slug/votes: public submission, public reading, moderation by the location.

Inactive votes exist only for those with access to the location (super, its owners and
admins); everyone else gets 404 for them and never sees `yourEmail` or `yourPhone`.
"""

import logging
import uuid
from types import SimpleNamespace
from typing import Any

from flask import Blueprint, current_app
from flask_login import current_user
from sqlalchemy import Row, Select, bindparam, func, literal_column, select, tuple_
from sqlalchemy.orm import joinedload

from .. import audit, moderation
from .. import vote_integrity as integrity
from ..access import has_location_access, located, owner_addresses
from ..endpoints import Access, Answer, endpoint
from ..gauges import VOTES
from ..models import (
    Employer,
    Listing,
    ListingCount,
    Location,
    OutboxMessage,
    OutboxStatus,
    User,
    Vote,
    VoteRevision,
    VoteType,
    utcnow,
)
from ..models.api_token import Scope
from ..models.vote import TALLIES
from ..platform.csv_export import columns, csv_response
from ..platform.errors import abort, invalid
from ..platform.extensions import db
from ..platform.limits import (
    exports_per_ip,
    token_endpoints,
    votes_per_ip,
    votes_per_location,
)
from ..platform.metrics import count
from ..platform.outbox import queue_mail
from ..platform.output import Written, schema_instance
from ..platform.page_queries import encoded_by_id, every_row, paginate
from ..platform.pagination import ListArgs
from ..platform.sql import json_list, json_of, json_text
from ..privacy import quotes_submitter
from ..schemas.common import ReceivedOut, StatusOut
from ..schemas.votes import (
    STAFF_FILTERS,
    BtobSubmission,
    BtocSubmission,
    ChallengeOut,
    EmployerSubmission,
    HeldMessageOut,
    PublicVoteOut,
    ReplyIn,
    ReplyOut,
    VoteBulkIn,
    VoteBulkOut,
    VoteCsvOut,
    VoteIn,
    VoteListArgs,
    VoteOut,
    VoteResultOut,
    VoteSummaryEmployer,
    VoteSummaryOut,
    VoteTarget,
    VoteUpdate,
)
from ..search import fold
from ..webhooks import events as webhook_events
from .changes import apply_changes, created
from .lookups import id_by_slug, named_or_422

log = logging.getLogger(__name__)
bp = Blueprint("votes", __name__, url_prefix="/locations/<slug:slug>/votes")

_listings = Listing.__table__
# Sorted by the table's columns: the results' statements are SQL alone (no ORM).
ResultArgs = ListArgs.sorted_by(
    {"votes": _listings.c.vote_count, "name": _listings.c.name}, default="-votes,name"
)
VoteArgs = VoteListArgs.sorted_by(
    {
        "createdAt": Vote.created_at,
        "updatedAt": Vote.updated_at,
        "businessName": Vote.business_name,
    },
    default="-createdAt",
)
VoteExportArgs = VoteArgs.without_paging()
# The full view for those with access to the location, the public one otherwise.
VIEWS = {True: VoteOut, False: PublicVoteOut}
LABELS = {VoteType.BTOB: "business-to-business", VoteType.BTOC: "business-to-consumer"}
WITH_EMPLOYER = (joinedload(Vote.employer),)
# Staff also see who wrote a reply: its author's id and address, and nothing else of them.
WITH_AUTHOR = (*WITH_EMPLOYER, joinedload(Vote.reply_author).load_only(User.id, User.email))
# Submissions: one allowance per client IP shared by every type; `Idempotency-Key` honoured;
# a form on any site may post them (API.md 13 … and issue 18: they use no credentials).
SUBMISSION = {
    "limits": (votes_per_location, votes_per_ip),
    "forms": True,
    "idempotent": True,
    "cross_site": True,
    "writes_with_commit": True,
}


def visible_votes(location: Location, access: bool) -> Select:
    stmt = select(Vote).where(Vote.location_id == location.id)
    if not access:
        stmt = stmt.where(Vote.active.is_(True))
    return stmt


# Built once (not for every vote, with their cache keys), their values bound: a location's
# employer by slug, and its employers by folded name.
_of_location = select(Employer).where(Employer.location_id == bindparam("location_id"))
EMPLOYER_BY_SLUG = _of_location.where(Employer.slug == bindparam("slug"))
EMPLOYERS_BY_NAME = _of_location.where(Employer.search_name == bindparam("folded")).order_by(
    Employer.slug
)


def employer_by_slug(location: Location, slug: str, within: str = "") -> Employer:
    """The location's employer a body names by slug; 422 on `employer` (of the object
    `within`) when there is none."""
    employer = db.session.scalar(EMPLOYER_BY_SLUG, {"location_id": location.id, "slug": slug})
    return employer_or_422(employer, slug, within)


def employer_or_422(employer: Employer | None, slug: str, within: str = "") -> Employer:
    return named_or_422(
        employer, Employer, slug, "employer", where=" at this location", within=within
    )


# The employer a submission names by slug (the columns a vote and its receipt use: no ORM
# object to build), and what the voter's address did before (vote_integrity.AddressHistory),
# in one statement: by the address's one hash, or by several while a key is rotated.
EMPLOYER_WITH_HISTORY = tuple(
    EMPLOYER_BY_SLUG.with_only_columns(Employer.id, Employer.slug, Employer.name).add_columns(
        *integrity.history_columns(Employer.id, several)
    )
    for several in (False, True)
)


def employer_with_history(
    location: Location, slug: str, address: str
) -> tuple[integrity.NamedEmployer, integrity.AddressHistory]:
    """The employer `slug` names at the location (422 when none), with what `address` did
    before there."""
    several, values = integrity.history_values(address, location.id)
    # Plain columns: run on the transaction's connection, past the ORM's loading steps
    # (and its autoflush: the submission has added nothing to the session yet).
    row = (
        db.session.connection()
        .execute(EMPLOYER_WITH_HISTORY[several], {**values, "slug": slug})
        .first()
    )
    if row is None:
        employer_or_422(None, slug)
    return integrity.NamedEmployer(*row[:3]), integrity.AddressHistory(*row[3:])


def employer_named(location: Location, name: str) -> Employer | None:
    """The employer of this location whose name equals `name`, ignoring case."""
    values = {"location_id": location.id, "folded": fold(name)}
    candidates = db.session.scalars(EMPLOYERS_BY_NAME, values)
    return next((e for e in candidates if e.name.casefold() == name.casefold()), None)


def vote_recipients(location: Location) -> list[str]:
    """The location's address, else its owners', else the configured fallback."""
    if location.email:
        return [location.email]
    owners = owner_addresses(location)
    if owners:
        return owners
    fallback = current_app.config.get("VOTE_FALLBACK_RECIPIENT")
    return [fallback] if fallback else []


# Nothing is committed in these three: the idempotency step commits the vote or message
# together with the answer it keeps for an `Idempotency-Key`.
@bp.post("/submit/employer")
@endpoint(EmployerSubmission, ReceivedOut, status=201, **SUBMISSION)
def submit_employer(data, location: Location):
    """Submit an employer vote (public); it awaits moderation."""
    typed_email = data.pop("typed_email")
    slug_given = data.pop("employer", None)
    history = None  # read with the employer when the body names it by slug
    employer: integrity.NamedEmployer | Employer | None
    if slug_given:
        employer, history = employer_with_history(location, slug_given, data["your_email"])
        # Not loaded as an object: a webhook's event names it by this slug, not read again.
        webhook_events.known_slug(Employer, employer.id, employer.slug)
    else:
        employer = employer_named(location, data["business_name"])
    # Held (answered as any other) when it looks automated: staff see it as suspect.
    suspect = integrity.screen_submission(location, data)
    vote = Vote(
        location_id=location.id,
        type=VoteType.EMPLOYER,
        active=False,
        employer_id=employer.id if employer is not None else None,
        suspect=suspect,
        **data,
    )
    integrity.mark_duplicate(vote, history)  # for staff; the answer is the same either way
    if not suspect:  # a held one mails no one: the address may be anybody's
        integrity.send_receipt(vote, location, typed_email, history, employer)
    db.session.add(vote)
    db.session.flush()
    count(VOTES, VoteType.EMPLOYER.value, "held" if suspect else "accepted")
    return {"id": vote.id, "status": "received"}


@bp.post("/submit/btob")
@endpoint(BtobSubmission, StatusOut, status=202, **SUBMISSION)
def submit_btob(data, location: Location):
    """Submit a business-to-business vote (public); it is mailed to the location."""
    return mail_vote(location, VoteType.BTOB, data)


@bp.post("/submit/btoc")
@endpoint(BtocSubmission, StatusOut, status=202, **SUBMISSION)
def submit_btoc(data, location: Location):
    """Submit a business-to-consumer vote (public); it is mailed to the location."""
    return mail_vote(location, VoteType.BTOC, data)


NO_RECIPIENT = "No recipient: set the location's e-mail, an owner, or VOTE_FALLBACK_RECIPIENT."


def mail_vote(location: Location, kind: VoteType, data: dict[str, Any]) -> dict[str, str]:
    """Queue a business vote to the location's recipients (kept as failed when it has none;
    held, not sent, when it looks automated, until staff release or discard it)."""
    held = integrity.screen_submission(location, data)
    recipients = vote_recipients(location)
    message = queue_mail(
        recipients,
        "vote",
        reply_to=data["your_email"],
        about=integrity.location_mail(location),
        location=location,
        label=LABELS[kind],
        vote=SimpleNamespace(**data),
    )
    count(VOTES, kind.value, "held" if held else "accepted")
    if held:
        message.status = OutboxStatus.HELD
    elif not recipients:
        # Kept, not lost: an operator can see it in the outbox and route it by hand.
        message.status, message.last_error = OutboxStatus.FAILED, NO_RECIPIENT
        db.session.flush()  # assigns the id the log line names
        log.error("vote for %s has no recipient; outbox message %s", location.slug, message.id)
    return {"status": "queued"}


@bp.get("/challenge")
@endpoint(response=ChallengeOut, cross_site=True)
def vote_challenge(location: Location):
    """A proof-of-work challenge for one submission to this location, valid 10 minutes
    (public; the ALTCHA widget's `challengeurl`). Solve it and send the solution as the
    submission's `altcha` field."""
    return Answer(integrity.new_challenge(location), headers={"Cache-Control": "no-store"})


HeldArgs = ListArgs.sorted_by({"createdAt": OutboxMessage.created_at}, default="-createdAt")


def held_messages(location: Location) -> Select:
    return select(OutboxMessage).where(
        OutboxMessage.about == integrity.location_mail(location),
        OutboxMessage.status == OutboxStatus.HELD,
    )


def held_message(location: Location, message_id: uuid.UUID) -> OutboxMessage:
    """The location's held message, locked for its release or discard; else 404."""
    message = db.session.scalar(
        held_messages(location).where(OutboxMessage.id == message_id).with_for_update()
    )
    if message is None:
        abort(404, "No such held message at this location.")
    return message


@bp.get("/held/")
@endpoint(
    response=HeldMessageOut,
    query=HeldArgs,
    paged=True,
    access=Access.ACCESS,
    scope=Scope.VOTES_READ,
)
def list_held(args, location: Location):
    """Business votes' mail held as possibly automated, newest first (API.md 17)."""
    return paginate(held_messages(location), args)


@bp.post("/held/id/<uuid:message_id>/release")
@endpoint(status=204, access=Access.ACCESS, scope=Scope.VOTES_MODERATE, not_found=True)
def release_held(location: Location, message_id: uuid.UUID):
    """Send a held message after all: it joins the outbox's queue."""
    message = held_message(location, message_id)
    if message.recipients:
        message.status, message.next_attempt_at = OutboxStatus.PENDING, utcnow()
    else:  # as when it was queued without one: kept, for an operator to route by hand
        message.status, message.last_error = OutboxStatus.FAILED, NO_RECIPIENT
    record_held(message, "release", location)
    db.session.commit()


@bp.post("/held/id/<uuid:message_id>/discard")
@endpoint(status=204, access=Access.ACCESS, scope=Scope.VOTES_MODERATE, not_found=True)
def discard_held(location: Location, message_id: uuid.UUID):
    """Delete a held message unsent."""
    message = held_message(location, message_id)
    record_held(message, "discard", location)
    db.session.delete(message)
    db.session.commit()


def record_held(message: OutboxMessage, verb: str, location: Location) -> None:
    """Staff's decision on a held message is a moderation act: one audit entry."""
    audit.record(
        f"mail.{verb}", message.id, audit.acting_user(), target_type="mail", location=location
    )


def filter_votes(stmt: Select, args: dict[str, Any], location: Location, access: bool) -> Select:
    """The list's filters; those on moderation (`confirmed`, `duplicate` …) only for staff,
    as the public sees neither (for them they change nothing)."""
    selection = {name: value for name, value in args.items() if access or name not in STAFF_FILTERS}
    if "employer" in selection:
        scope = Employer.location_id == location.id
        selection["employer_id"] = id_by_slug(Employer, selection["employer"], scope)
    return stmt.where(*moderation.vote_criteria(selection))


@bp.get("/")
@endpoint(response=VoteOut, query=VoteArgs, paged=True, public=PublicVoteOut)
def list_votes(args, location: Location):
    """List votes, newest first; inactive ones only for those with access."""
    access = has_location_access(current_user, location, Scope.VOTES_READ)
    stmt = filter_votes(visible_votes(location, access), args, location, access)
    page = paginate(stmt, args, options=WITH_AUTHOR if access else WITH_EMPLOYER)
    return Answer(page, schema=VIEWS[access])


# What the votes export shows is determined by the revision of the location's votes and,
# for the employers' slugs it names, of its employers (ListingCount), with its URL and its
# columns (a new release may change those while the revisions stay): built once.
EXPORT_COLUMNS = tuple(columns(schema_instance(VoteCsvOut)))
EXPORT_REVISIONS = select(
    select(VoteRevision.revision)
    .where(VoteRevision.location_id == bindparam("location_id"))
    .scalar_subquery(),
    select(ListingCount.revision)
    .where(
        ListingCount.location_id == bindparam("location_id"),
        ListingCount.kind == Employer.__mapper__.polymorphic_identity,
    )
    .scalar_subquery(),
)


def export_revision(location: Location) -> tuple[Any, ...]:
    revisions = db.session.execute(EXPORT_REVISIONS, {"location_id": location.id}).one()
    return (location.id, "votes", *revisions, EXPORT_COLUMNS)


@bp.get("/export.csv")
@endpoint(
    response=VoteCsvOut,
    query=VoteExportArgs,
    csv=True,
    access=Access.ACCESS,
    scope=Scope.VOTES_READ,
    limits=(exports_per_ip,),
    revision=export_revision,
)
def export_votes(args, location: Location):
    """Every vote of the location as CSV, staff fields included (the list's filters, sort)."""
    stmt = filter_votes(visible_votes(location, True), args, location, True)
    rows = every_row(stmt, args, options=WITH_EMPLOYER)
    return csv_response(VoteCsvOut, rows, f"{location.slug}-votes.csv")


@bp.get("/id/<uuid:vote_id>")
@endpoint(response=VoteOut, public=PublicVoteOut)
def get_vote(location: Location, vote_id: uuid.UUID):
    """Get one vote; an inactive one is a 404 for anyone without access."""
    access = has_location_access(current_user, location, Scope.VOTES_READ)
    vote = db.session.scalar(visible_votes(location, access).where(Vote.id == vote_id))
    if vote is None:
        abort(404, "No such vote.")
    return Answer(vote, schema=VIEWS[access])


def resolve_employer(location: Location, data: dict[str, Any]) -> None:
    if "employer" in data:
        slug = data.pop("employer")
        data["employer"] = employer_by_slug(location, slug) if slug else None


def vote_of(location: Location, vote_id: uuid.UUID) -> Vote:
    """The vote to moderate, locked for this change (see `vote_integrity.locked`)."""
    vote = integrity.locked_vote((Vote.location_id == location.id) & (Vote.id == vote_id))
    if vote is None:
        abort(404, "No such vote.")
    return vote


@bp.post("/")
@endpoint(VoteIn, VoteOut, status=201, access=Access.ACCESS, scope=Scope.VOTES_MODERATE)
def create_vote(data, location: Location):
    """Enter a vote by hand (an employer vote, e.g. from paper); it counts as confirmed.

    Staff vouch for it, so it gets no receipt.
    """
    resolve_employer(location, data)
    vote = Vote(location_id=location.id, type=VoteType.EMPLOYER, **data)
    integrity.confirm(vote)
    integrity.mark_duplicate(vote)
    db.session.add(vote)
    db.session.commit()
    return created(vote, "get_vote", vote_id=vote.id)


@bp.put("/")
@endpoint(
    VoteUpdate,
    VoteOut,
    access=Access.ACCESS,
    scope=Scope.VOTES_MODERATE,
    conflicts=True,
    not_found=True,
)
def update_vote(data, location: Location):
    """Moderate the vote named by `id`: activate, link an employer, correct the text."""
    vote = vote_of(location, data.pop("id"))
    if data.get("active") is True and not vote.active:
        integrity.refuse_unconfirmed_activation([vote])
    resolve_employer(location, data)
    apply_changes(vote, data)
    db.session.commit()
    return vote


@bp.delete("/")
@endpoint(VoteTarget, status=204, access=Access.ACCESS, scope=Scope.VOTES_MODERATE, not_found=True)
def delete_vote(target, location: Location):
    """Delete the vote named by `id`."""
    integrity.delete_vote(vote_of(location, target["id"]))
    db.session.commit()


@bp.post("/bulk")
@endpoint(
    VoteBulkIn,
    VoteBulkOut,
    access=Access.ACCESS,
    scope=Scope.VOTES_MODERATE,
    idempotent=True,
    conflicts=True,
    not_found=True,
)
def bulk_moderate(data, location: Location):
    """Activate, deactivate, delete, link to an employer or clear as suspect many votes at
    once, named by ids or selected by a filter: all or nothing (`dryRun`: counts only)."""
    selection = data.get("filter")
    if selection and "employer" in selection:  # null: votes linked to none
        slug = selection["employer"]
        selection["employer_id"] = slug and employer_by_slug(location, slug, "filter").id
    employer = data.get("employer") and employer_by_slug(location, data["employer"])
    votes = moderation.selected_votes(
        location, data.get("ids"), selection, lock=not data["dry_run"]
    )
    return moderation.moderate(votes, data["action"], employer, dry_run=data["dry_run"])


@bp.put("/id/<uuid:vote_id>/reply")
@endpoint(
    ReplyIn,
    ReplyOut,
    responses={201: ReplyOut},
    access=Access.ACCESS,
    scope=Scope.VOTES_MODERATE,
)
def put_reply(data, location: Location, vote_id: uuid.UUID):
    """Answer a vote in public (201), or replace the answer's text (200): one per vote.

    A reply may not quote its voter's e-mail address or phone number (422). The first one
    to a confirmed vote is mailed to its submitter with a withdraw link."""
    vote = vote_of(location, vote_id)
    body = data["body"]
    if quotes_submitter(vote, body):
        invalid("body", "May not contain the voter's e-mail address or phone number.")
    first = vote.reply is None
    if first or body != vote.reply_body:
        now = utcnow()
        if first:
            vote.reply_created_at = now
        vote.reply_body, vote.reply_updated_at = body, now
        vote.reply_author_id = current_user.id
        if first:
            integrity.send_reply_notice(vote, location)  # edits send nothing
        db.session.commit()
    return Answer(vote, status=201 if first else 200)


@bp.delete("/id/<uuid:vote_id>/reply")
@endpoint(status=204, access=Access.ACCESS, scope=Scope.VOTES_MODERATE, not_found=True)
def delete_reply(location: Location, vote_id: uuid.UUID):
    """Delete the vote's reply (404 when it has none)."""
    vote = vote_of(location, vote_id)
    if vote.reply is None:
        abort(404, "This vote has no reply.")
    vote.reply_body = vote.reply_author_id = None
    vote.reply_created_at = vote.reply_updated_at = None
    db.session.commit()


# The summary: the location's counts (vote_integrity.py keeps them; none before its first
# vote) and those of its employers with at least one vote, by name (then id, as the
# employers sorted by name), written as the answer by the database in the statement that
# finds the path's location (sql.json_of). Built once, the slug bound.
_locations, _summaries = Location.__table__, VoteRevision.__table__
_employer_counts = (
    select(
        json_of(
            schema_instance(VoteSummaryEmployer),
            {
                "slug": _listings.c.slug,
                "name": _listings.c.name,
                "active": _listings.c.active_votes,
                "pending": _listings.c.pending_votes,
            },
        ).label("counts"),
        _listings.c.name,
        _listings.c.id,
    )
    .where(
        _listings.c.location_id == _locations.c.id,
        _listings.c.kind == Employer.__mapper__.polymorphic_identity,
        (_listings.c.active_votes + _listings.c.pending_votes) > 0,
    )
    .order_by(_listings.c.name, _listings.c.id)  # the index's order: no sort
    .correlate(_locations)
    .subquery()
)
EMPLOYER_COUNTS = select(
    json_list(_employer_counts.c.counts, tuple_(_employer_counts.c.name, _employer_counts.c.id))
).scalar_subquery()
SUMMARY = json_of(
    schema_instance(VoteSummaryOut),
    {
        **{name: func.coalesce(_summaries.c[name], 0) for name in TALLIES},
        "employers": func.coalesce(EMPLOYER_COUNTS, literal_column("'[]'")),
    },
)
LOCATION_WITH_SUMMARY = (
    select(_locations.c.id, _locations.c.slug, json_text(SUMMARY).label("summary"))
    .select_from(_locations.outerjoin(_summaries, _summaries.c.location_id == _locations.c.id))
    .where(_locations.c.slug == bindparam("slug"))
)


def locate_with_summary(slug: str) -> Row:
    """The path's location as the summary uses it (a row with its `id` and `slug`), and
    its summary as the answer's JSON text, in one statement."""
    return located(db.session.execute(LOCATION_WITH_SUMMARY, {"slug": slug}).first(), slug)


@bp.get("/summary")
@endpoint(
    response=VoteSummaryOut,
    access=Access.ACCESS,
    scope=Scope.VOTES_READ,
    locate=locate_with_summary,
)
def vote_summary(location: Row):  # locate_with_summary: its id, slug and summary
    """The moderation queue at a glance: stored counts, whatever the number of votes."""
    return Written(location.summary)


@bp.get("/results")
@endpoint(response=VoteResultOut, query=ResultArgs, paged=True)
def vote_results(args, location: Location):
    """Active, non-duplicate employer votes per employer, most first (public)."""
    return paginate(
        EMPLOYERS_VOTED_FOR,
        args,
        tiebreak=_listings.c.id,
        encoded=RESULTS_OUTPUT,
        params={"location_id": location.id},
    )


# Built once, the location bound per request: the employers with counted votes, and each
# one's result written by the database (sql.json_of).
EMPLOYERS_VOTED_FOR = select(_listings.c.id).where(
    _listings.c.location_id == bindparam("location_id"),
    _listings.c.kind == Employer.__mapper__.polymorphic_identity,
    _listings.c.vote_count > 0,
)
RESULTS_OUTPUT = encoded_by_id(
    select(json_text(json_of(schema_instance(VoteResultOut), _listings.c))), _listings.c.id
)


receipts = Blueprint("receipts", __name__, url_prefix="/votes")


@receipts.post("/confirm/<token>")
@endpoint(response=StatusOut, limits=(token_endpoints,))
def confirm_vote(token: str):
    """Confirm your vote with the token from its receipt (again: the same answer)."""
    integrity.confirm(integrity.vote_by_receipt(token))
    db.session.commit()
    return {"status": "confirmed"}


@receipts.post("/withdraw/<token>")
@endpoint(status=204, limits=(token_endpoints,))
def withdraw_vote(token: str):
    """Withdraw your vote with the token from its receipt: it and your details are deleted."""
    vote = integrity.vote_by_receipt(token)
    webhook_events.withdrawing(vote, db.session())
    integrity.delete_vote(vote)
    db.session.commit()
