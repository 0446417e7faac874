"""Who may do what. Views declare it with these decorators; a super passes every check."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from flask import session
from flask_login import current_user
from sqlalchemy import select

from .errors import abort
from .extensions import db, login_manager
from .models import Location, Membership, Role, User


@login_manager.user_loader
def load_user(session_token: str) -> User | None:
    # Looked up by the per-user session token, which a password change replaces.
    user = db.session.scalar(select(User).where(User.session_token == session_token))
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


def login_required(view: Callable) -> Callable:
    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not current_user.is_authenticated:
            abort(401, "Sign in to use this endpoint.")
        return view(*args, **kwargs)

    wrapper.access = "login"  # type: ignore[attr-defined]  (read by the OpenAPI document)
    return wrapper


def require_super(view: Callable) -> Callable:
    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not current_user.is_authenticated:
            abort(401, "Sign in to use this endpoint.")
        if not current_user.is_super:
            abort(403, "Only a super may do this.")
        return view(*args, **kwargs)

    wrapper.access = "super"  # type: ignore[attr-defined]
    return wrapper


def get_location_or_404(slug: str) -> Location:
    location = db.session.scalar(select(Location).where(Location.slug == slug))
    if location is None:
        abort(404, f"No location {slug!r}.")
    return location


def require_location_role(*roles: Role) -> Callable[[Callable], Callable]:
    """Needs a super or one of `roles` at the location named by the `slug` path parameter.

    The view receives the loaded `location` instead of `slug`.
    """

    def decorator(view: Callable) -> Callable:
        @wraps(view)
        def wrapper(*args: Any, slug: str, **kwargs: Any) -> Any:
            if not current_user.is_authenticated:
                abort(401, "Sign in to use this endpoint.")
            location = get_location_or_404(slug)
            if not current_user.is_super and location_role(current_user, location) not in roles:
                abort(403, "You do not have this role at this location.")
            return view(*args, location=location, **kwargs)

        wrapper.access = (  # type: ignore[attr-defined]
            "super" if not roles else "owner" if set(roles) == {Role.OWNER} else "access"
        )
        return wrapper

    return decorator


require_location_owner = require_location_role(Role.OWNER)
require_location_access = require_location_role(Role.OWNER, Role.ADMIN)
