"""Bulk moderation (API.md 15): one action on many votes of a location, all or nothing.

The votes are selected by their ids (each must be a vote of the location: 404 naming
those that are not) or by a filter (at most `BULK_CAP`: 422 past it), locked in one
statement (vote_integrity.locked), checked (activating unconfirmed votes under
`VOTE_REQUIRE_CONFIRMATION`: 409 naming them), and only then changed, in the request's
transaction: nothing is written unless every vote can be. The changes go through the ORM
as one vote's would, so each changed vote makes its audit entry (with the request's id)
and the stored counts follow in the same flush. A dry run answers the same counts and
refusals, and changes nothing.
"""

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_

from .models import Employer, Location, Vote
from .platform.errors import abort, invalid
from .platform.extensions import db
from .schemas.votes import BULK_ACTIONS
from .vote_integrity import delete_votes, locked, refuse_unconfirmed_activation

BULK_CAP = 5000


@dataclass(frozen=True)
class Action:
    """Whether a vote would change (given the action's employer), and the change."""

    changes: Callable[[Vote, Employer | None], bool]
    apply: Callable[[list[Vote], Employer | None], None]


def _setting(attribute: str, value: Any) -> Callable[[list[Vote], Employer | None], None]:
    def apply(votes: list[Vote], _employer: Employer | None) -> None:
        for vote in votes:
            setattr(vote, attribute, value)

    return apply


def _link(votes: list[Vote], employer: Employer | None) -> None:
    for vote in votes:
        vote.employer = employer


def _employer_id(employer: Employer | None) -> uuid.UUID | None:
    return None if employer is None else employer.id


ACTIONS = {
    "activate": Action(lambda vote, _: not vote.active, _setting("active", True)),
    "deactivate": Action(lambda vote, _: vote.active, _setting("active", False)),
    "clearSuspect": Action(lambda vote, _: vote.suspect, _setting("suspect", False)),
    "setEmployer": Action(lambda vote, e: vote.employer_id != _employer_id(e), _link),
    "delete": Action(lambda _vote, _: True, lambda votes, _: delete_votes(votes)),
}
assert set(ACTIONS) == set(BULK_ACTIONS)  # what the request schema accepts, each done here


def vote_criteria(selection: Mapping[str, Any]) -> list[ColumnElement[bool]]:
    """What the votes list's filters and a bulk action's filter select: every field given
    must hold (`employer_id`: an id, or a subquery finding one)."""
    criteria = [getattr(Vote, name).is_(selection[name]) for name in FLAGS if name in selection]
    for name, column in (("duplicate", Vote.duplicate_of_id), ("replied", Vote.reply_body)):
        if name in selection:
            present = column.is_not(None)
            criteria.append(present if selection[name] else ~present)
    if "employer_id" in selection:
        criteria.append(Vote.employer_id == selection["employer_id"])
    if "submitted_before" in selection:
        criteria.append(Vote.created_at < selection["submitted_before"])
    return criteria


FLAGS = ("active", "confirmed", "suspect")


def selected_votes(
    location: Location, ids: list[uuid.UUID] | None, selection: Any, *, lock: bool = True
) -> list[Vote]:
    """The votes a request names, locked (unless `lock` is false: a dry run); 404 naming
    ids that are not the location's votes, 422 when a filter matches more than BULK_CAP."""
    if ids is not None:
        wanted = list(dict.fromkeys(ids))
        of_location = (Vote.location_id == location.id) & Vote.id.in_(wanted)
        votes = locked(of_location, limit=None, lock=lock)
        missing = set(wanted) - {vote.id for vote in votes}
        if missing:
            named = sorted(str(vote_id) for vote_id in missing)
            abort(404, f"No such vote at this location: {', '.join(named)}.", ids=named)
        return votes
    matching = and_(Vote.location_id == location.id, *vote_criteria(selection))
    votes = locked(matching, BULK_CAP + 1, lock=lock)
    if len(votes) > BULK_CAP:
        invalid("filter", f"Matches more than {BULK_CAP:,} votes: narrow it.")
    return votes


def moderate(
    votes: list[Vote], action: str, employer: Employer | None, *, dry_run: bool
) -> dict[str, Any]:
    """Apply `action` to every vote it changes, or to none (a refusal, or a dry run)."""
    rule = ACTIONS[action]
    changing = [vote for vote in votes if rule.changes(vote, employer)]
    if action == "activate":
        refuse_unconfirmed_activation(changing)
    if not dry_run:
        rule.apply(changing, employer)
        db.session.flush()
    return {"matched": len(votes), "changed": len(changing), "dry_run": dry_run}
