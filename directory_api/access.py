"""Who may do what: views declare it with `@endpoint(access=…)`; a super passes every check."""

import enum
from typing import Any

from flask import session
from flask_login import current_user
from sqlalchemy import bindparam, select
from sqlalchemy.orm import lazyload

from .models import Location, Membership, Role, User
from .platform.errors import abort
from .platform.extensions import db, login_manager

# Built once: who a session names, by the per-user session token a password change replaces.
SIGNED_IN_USER = select(User).where(User.session_token == bindparam("token"))


@login_manager.user_loader
def load_user(session_token: str) -> User | None:
    user = db.session.scalar(SIGNED_IN_USER, {"token": session_token})
    if user is None:
        session.clear()  # a dead session: forget it instead of keeping it alive
    return user


@login_manager.unauthorized_handler
def unauthorized() -> None:
    abort(401, "Sign in to use this endpoint.")


def location_role(user: Any, location: Location) -> Role | None:
    """The role `user` holds at `location`, if any (supers hold none of their own)."""
    if not user.is_authenticated:
        return None
    return db.session.scalar(
        select(Membership.role).where(
            Membership.user_id == user.id, Membership.location_id == location.id
        )
    )


def has_location_access(user: Any, location: Location) -> bool:
    """Super, or owner or admin of the location."""
    return user.is_authenticated and (user.is_super or location_role(user, location) is not None)


def check_may_edit_details(target: User) -> None:
    """403 unless the signed-in user may change `target`'s name and phone (API.md 9).

    A super may change anyone's. Anyone else (an owner, through …/admins/id/:id) only those
    of a user who is not a super and whose every role is at a location they own: a role
    elsewhere means someone else also answers for that account.
    """
    if current_user.is_super:
        return
    if target.is_super:
        abort(403, "Only a super may change a super's details.")
    owned = select(Membership.location_id).where(
        Membership.user_id == current_user.id, Membership.role == Role.OWNER
    )
    elsewhere = db.session.scalar(
        select(Membership.location_id)
        .where(Membership.user_id == target.id, Membership.location_id.not_in(owned))
        .limit(1)
    )
    if elsewhere is not None:
        abort(403, "This user also has a role at a location you do not own.")


# Built once: the statement and its cache key are not made again for every request. The
# region is loaded only if a view reads it (the location's own answers).
LOCATION_BY_SLUG = (
    select(Location).where(Location.slug == bindparam("slug")).options(lazyload(Location.region))
)


def get_location_or_404(slug: str) -> Location:
    """The location a path names: the lookup of every /locations/:slug/… endpoint (or, for
    one that loads more with it, `located`)."""
    return located(db.session.scalar(LOCATION_BY_SLUG, {"slug": slug}), slug)


def located(location: Location | None, slug: str) -> Location:
    """`location`, found by `slug`, or the 404 of a path naming none."""
    if location is None:
        abort(404, f"No location {slug!r}.")
    return location


class Access(enum.StrEnum):
    """Who may call an endpoint (a super passes every check). The values are the document's
    `x-required-role`."""

    LOGIN = "login"  # signed in, any user
    SUPER = "super"
    OWNER = "owner"  # an owner of the location in the path
    ACCESS = "access"  # an owner or admin of the location in the path


ROLES_AT_LOCATION = {
    Access.SUPER: frozenset(),
    Access.OWNER: frozenset({Role.OWNER}),
    Access.ACCESS: frozenset({Role.OWNER, Role.ADMIN}),
}


def check_signed_in(access: Access | None) -> None:
    """401 for an anonymous caller of a protected endpoint."""
    if access is not None and not current_user.is_authenticated:
        abort(401, "Sign in to use this endpoint.")


def check_access(access: Access | None, location: Location | None) -> None:
    """403 unless the signed-in caller has `access` (at `location`, when the path names one)."""
    if access is None or access is Access.LOGIN or current_user.is_super:
        return
    if location is None:
        abort(403, "Only a super may do this.")
    if location_role(current_user, location) not in ROLES_AT_LOCATION[access]:
        abort(403, "You do not have this role at this location.")
