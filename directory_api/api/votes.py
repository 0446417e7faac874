"""/locations/:slug/votes: public submission, public reading, moderation by the location.

Inactive votes exist only for those with access to the location (super, its owners and
admins); everyone else gets 404 for them and never sees `yourEmail` or `yourPhone`.
"""

import logging
import uuid
from types import SimpleNamespace
from typing import Any

from flask import Blueprint, current_app, url_for
from flask_login import current_user
from sqlalchemy import Select, select
from sqlalchemy.orm import joinedload

from ..access import get_location_or_404, has_location_access, require_location_access
from ..bodies import accepts_forms, load_body
from ..errors import abort
from ..extensions import db
from ..idempotency import idempotent
from ..limits import votes_per_ip
from ..models import (
    Employer,
    Location,
    Membership,
    OutboxStatus,
    Role,
    User,
    UserStatus,
    Vote,
    VoteType,
)
from ..openapi import spec
from ..outbox import queue_mail
from ..pagination import page_response, parse_list_args
from ..schemas.common import ReceivedOut, StatusOut
from ..schemas.votes import (
    SUBMISSIONS,
    PublicVoteOut,
    VoteIn,
    VoteListArgs,
    VoteOut,
    VoteTarget,
    VoteUpdate,
)
from ..search import fold
from .common import apply_changes, by_slug_or_422, created, get_or_404, id_by_slug, no_content

log = logging.getLogger(__name__)
bp = Blueprint("votes", __name__, url_prefix="/locations/<slug:slug>/votes")

SORTABLE = {
    "createdAt": Vote.created_at,
    "updatedAt": Vote.updated_at,
    "businessName": Vote.business_name,
}
LABELS = {VoteType.BTOB: "business-to-business", VoteType.BTOC: "business-to-consumer"}
load_employer = (joinedload(Vote.employer),)


# The full view for those with access to the location, the public one otherwise.
VIEWS = {True: (VoteOut(), VoteOut(many=True)), False: (PublicVoteOut(), PublicVoteOut(many=True))}
LIST_ARGS = VoteListArgs()
SUBMISSION_SCHEMAS = {kind: schema() for kind, schema in SUBMISSIONS.items()}


def visible_votes(location: Location, access: bool) -> Select:
    stmt = select(Vote).where(Vote.location_id == location.id)
    if not access:
        stmt = stmt.where(Vote.active.is_(True))
    return stmt


def employer_by_slug(location: Location, slug: str) -> Employer:
    return by_slug_or_422(
        Employer, slug, "employer", Employer.location_id == location.id, where=" at this location"
    )


def employer_named(location: Location, name: str) -> Employer | None:
    """The employer of this location whose name equals `name`, ignoring case."""
    candidates = db.session.scalars(
        select(Employer)
        .where(Employer.location_id == location.id, Employer.search_name == fold(name))
        .order_by(Employer.slug)
    )
    return next((e for e in candidates if e.name.casefold() == name.casefold()), None)


def vote_recipients(location: Location) -> list[str]:
    """The location's address, else its owners', else the configured fallback."""
    if location.email:
        return [location.email]
    owners = db.session.scalars(
        select(User.email)
        .join(Membership, Membership.user_id == User.id)
        .where(
            Membership.location_id == location.id,
            Membership.role == Role.OWNER,
            User.status == UserStatus.ACTIVE,  # owners who have not registered yet get none
        )
        .order_by(User.email)
    ).all()
    if owners:
        return list(owners)
    fallback = current_app.config.get("VOTE_FALLBACK_RECIPIENT")
    return [fallback] if fallback else []


def submit(slug: str, kind: VoteType):
    """Take a public submission of type `kind` for the location `slug`.

    Nothing is committed here: `@idempotent` commits the vote or message together with the
    answer it keeps for an `Idempotency-Key`.
    """
    location = get_location_or_404(slug)
    data = load_body(SUBMISSION_SCHEMAS[kind])
    if kind is VoteType.EMPLOYER:
        slug_given = data.pop("employer", None)
        employer = (
            employer_by_slug(location, slug_given)
            if slug_given
            else employer_named(location, data["business_name"])
        )
        vote = Vote(location_id=location.id, type=kind, active=False, employer=employer, **data)
        db.session.add(vote)
        db.session.flush()
        vote_id = str(vote.id)  # read before the commit expires it (no extra SELECT)
        return {"id": vote_id, "status": "received"}, 201

    recipients = vote_recipients(location)
    message = queue_mail(
        recipients,
        "vote",
        reply_to=data["your_email"],
        location=location,
        label=LABELS[kind],
        vote=SimpleNamespace(**data),
    )
    if not recipients:
        # Kept, not lost: an operator can see it in the outbox and route it by hand.
        message.status = OutboxStatus.FAILED
        message.last_error = (
            "No recipient: set the location's e-mail, an owner, or VOTE_FALLBACK_RECIPIENT."
        )
        db.session.flush()  # assigns the id the log line names
        log.error("vote for %s has no recipient; outbox message %s", location.slug, message.id)
    return {"status": "queued"}, 202


def submission_route(kind: VoteType) -> None:
    """POST /submit/<type>: one route per type, so each documents its own body schema."""

    def view(slug: str):
        return submit(slug, kind)

    view.__name__ = view.__qualname__ = f"submit_{kind.value}"
    view.__doc__ = (
        "Submit an employer vote (public); it awaits moderation."
        if kind is VoteType.EMPLOYER
        else f"Submit a {LABELS[kind]} vote (public); it is mailed to the location."
    )
    answer, status = (ReceivedOut, 201) if kind is VoteType.EMPLOYER else (StatusOut, 202)
    documented = spec(body=SUBMISSIONS[kind], response=answer, status=status, rate_limited=True)(
        idempotent(view)
    )
    bp.add_url_rule(
        f"/submit/{kind.value}",
        view_func=votes_per_ip(accepts_forms(documented)),
        methods=["POST"],
    )


for vote_kind in VoteType:
    submission_route(vote_kind)


def filter_votes(stmt: Select, args: dict[str, Any], location: Location) -> Select:
    if "employer" in args:
        employer = id_by_slug(Employer, args["employer"], Employer.location_id == location.id)
        stmt = stmt.where(Vote.employer_id == employer)
    if "active" in args:
        stmt = stmt.where(Vote.active.is_(args["active"]))
    return stmt


@bp.get("/")
@spec(response=VoteOut, query=VoteListArgs, paged=True, sortable=SORTABLE)
def list_votes(slug: str):
    """List votes, newest first; inactive ones only for those with access."""
    location = get_location_or_404(slug)
    args = parse_list_args(LIST_ARGS)
    access = has_location_access(current_user, location)
    stmt = filter_votes(visible_votes(location, access), args, location)
    return page_response(
        stmt,
        args,
        VIEWS[access][1].dump,
        sortable=SORTABLE,
        default_sort="-createdAt",
        tiebreak=Vote.id,
        options=load_employer,
    )


@bp.get("/id/<uuid:vote_id>")
@spec(response=VoteOut)
def get_vote(slug: str, vote_id: uuid.UUID):
    """Get one vote; an inactive one is a 404 for anyone without access."""
    location = get_location_or_404(slug)
    access = has_location_access(current_user, location)
    vote = db.session.scalar(visible_votes(location, access).where(Vote.id == vote_id))
    if vote is None:
        abort(404, "No such vote.")
    return VIEWS[access][0].dump(vote)


def resolve_employer(location: Location, data: dict[str, Any]) -> None:
    if "employer" in data:
        slug = data.pop("employer")
        data["employer"] = employer_by_slug(location, slug) if slug else None


def vote_of(location: Location, vote_id: uuid.UUID) -> Vote:
    return get_or_404(Vote, Vote.location_id == location.id, Vote.id == vote_id, what="vote")


@bp.post("/")
@require_location_access
@spec(body=VoteIn, response=VoteOut, status=201)
def create_vote(location: Location):
    """Enter a vote by hand (an employer vote, e.g. from paper)."""
    data = load_body(VoteIn())
    resolve_employer(location, data)
    vote = Vote(location_id=location.id, type=VoteType.EMPLOYER, **data)
    db.session.add(vote)
    db.session.commit()
    url = url_for(".get_vote", slug=location.slug, vote_id=vote.id)
    return created(VIEWS[True][0].dump(vote), url)


@bp.put("/")
@require_location_access
@spec(body=VoteUpdate, response=VoteOut, not_found=True)
def update_vote(location: Location):
    """Moderate the vote named by `id`: activate, link an employer, correct the text."""
    data = load_body(VoteUpdate())
    vote = vote_of(location, data.pop("id"))
    resolve_employer(location, data)
    apply_changes(vote, data)
    db.session.commit()
    return VIEWS[True][0].dump(vote)


@bp.delete("/")
@require_location_access
@spec(body=VoteTarget, status=204, not_found=True)
def delete_vote(location: Location):
    """Delete the vote named by `id`."""
    data = load_body(VoteTarget())
    db.session.delete(vote_of(location, data["id"]))
    db.session.commit()
    return no_content()
