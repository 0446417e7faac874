"""Who the caller is and what they may do: views declare it with `@endpoint(access=…,
scope=…)`; a super passes every role check.

A caller is a session (Flask-Login, the cookie) or a personal API token (`Authorization:
Bearer`, API.md 14), never both: a bearer request is identified here before anything else
reads who is calling, and a cookie sent beside it plays no part. A token acts as its user
with that user's current roles, narrowed by its scopes and the locations it is limited to.
"""

import enum
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flask import Flask, Response, g, request, session
from flask_login import current_user
from sqlalchemy import Row, Select, bindparam, or_, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import lazyload, undefer

from .models import ApiToken, Location, Membership, Role, User, UserStatus
from .models.api_token import INCLUDED, Scope
from .platform.application import view_says  # `shows_roles`, `hidden_from_strangers`
from .platform.bearer import bearer_of, token_hash, well_formed
from .platform.current import current_application, current_globals, current_request
from .platform.errors import abort
from .platform.extensions import db, login_manager
from .platform.types import utcnow

log = logging.getLogger(__name__)

# Built once: who a session names, by the per-user session token a password change replaces.
SIGNED_IN_USER = select(User).where(User.session_token == bindparam("token"))


def with_roles(stmt: Select) -> Select:
    """`stmt`, which finds who asks (a User first), with their roles as plain columns: each
    role's location slug and role, a row per role (one row, the two None, for none). For a
    view that shows them (`shows_roles`, /me): read in the statement that finds who asks
    (one round trip, not two), by no other view; `keep_roles` hands them to the user."""
    return (
        stmt.add_columns(Location.slug, Membership.role)
        .outerjoin(Membership, Membership.user_id == User.id)
        .outerjoin(Location, Location.id == Membership.location_id)
    )


def keep_roles(rows: Sequence[Row]) -> User | None:
    """The user of the rows `with_roles` read (None for none), given the roles of them all
    (`User.roles_read`, what UserOut shows)."""
    if not rows:
        return None
    user = rows[0][0]
    user.roles_read = sorted((row[-2], row[-1]) for row in rows if row[-2] is not None)
    return user


SIGNED_IN_USER_WITH_ROLES = with_roles(SIGNED_IN_USER)


@login_manager.user_loader
def load_user(session_token: str) -> User | None:
    if view_says("shows_roles"):
        rows = db.session.execute(SIGNED_IN_USER_WITH_ROLES, {"token": session_token}).all()
        user = keep_roles(rows)
    else:
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


def has_location_access(user: Any, location: Location, scope: "Scope") -> bool:
    """Super, or owner or admin of the location; through a token, one that reaches `scope`
    there."""
    return (
        user.is_authenticated
        and may_use(scope, location)
        and (user.is_super or location_role(user, location) is not None)
    )


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


def owner_addresses(location: Location) -> list[str]:
    """The addresses of the location's owners who have registered (an invited owner who
    has not gets no mail meant for those who act), in order."""
    return list(
        db.session.scalars(
            select(User.email)
            .join(Membership, Membership.user_id == User.id)
            .where(
                Membership.location_id == location.id,
                Membership.role == Role.OWNER,
                User.status == UserStatus.ACTIVE,
            )
            .order_by(User.email)
        )
    )


# Built once: the statement and its cache key are not made again for every request. The
# region is loaded only if a view reads it (the location's own answers).
LOCATION_BY_SLUG = (
    select(Location).where(Location.slug == bindparam("slug")).options(lazyload(Location.region))
)


# A write loads with it whether webhooks listen to the location (webhooks/events.py).
LOCATION_TO_CHANGE = LOCATION_BY_SLUG.options(undefer(Location.listened))
READS = frozenset({"GET", "HEAD", "OPTIONS"})


def get_location_or_404(slug: str) -> Location:
    """The location a path names: the lookup of every /locations/:slug/… endpoint (or, for
    one that loads more with it, `located`)."""
    stmt = LOCATION_BY_SLUG if request.method in READS else LOCATION_TO_CHANGE
    return located(db.session.scalar(stmt, {"slug": slug}), slug)


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
# Who may, said in a 403 (issue 35: an admin at their own location was told they had no
# role there, when the truth is that only an owner may).
WHO_MAY = {
    Access.SUPER: "Only a super may do this.",
    Access.OWNER: "Only an owner of this location (or a super) may do this.",
    Access.ACCESS: "Only an owner or an admin of this location (or a super) may do this.",
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
        abort(403, WHO_MAY[Access.SUPER])
    if location_role(current_user, location) not in ROLES_AT_LOCATION[access]:
        abort(403, WHO_MAY[access])


TOKEN_PREFIX = "dapi_"  # noqa: S105 (a prefix, not a secret)
LAST_USE_EVERY = timedelta(minutes=1)  # how often a token's last use is written, at most
INVALID_TOKEN = {"WWW-Authenticate": 'Bearer error="invalid_token"'}


@dataclass(frozen=True, slots=True)
class CallingToken:
    """What a request's checks read of the token it came with (its row's columns: no ORM
    object of its own to build on every request)."""

    id: uuid.UUID
    user_id: uuid.UUID
    scopes: list[str]
    location_ids: list[str] | None

    def limited_to(self, location_id: Any) -> bool:
        """Whether it may act at the location with this id."""
        return self.location_ids is None or str(location_id) in self.location_ids


# Built once: the user of the unrevoked token a hash names, and what the checks read of it.
TOKEN_BY_HASH = (
    select(
        User,
        ApiToken.id,
        ApiToken.user_id,
        ApiToken.scopes,
        ApiToken.location_ids,
        ApiToken.expires_at,
        ApiToken.last_used_at,
    )
    .join(ApiToken, ApiToken.user_id == User.id)
    .where(ApiToken.token_hash == bindparam("hash"), ApiToken.revoked_at.is_(None))
)
TOKEN_BY_HASH_WITH_ROLES = with_roles(TOKEN_BY_HASH)


def refuse_token(detail: str) -> None:
    """401 for a token that opens nothing, except on a route that answers anyone it does
    not serve 404 (/metrics, API.md 18): there it is no token, and the route answers as it
    would without one (a 401 would tell a stranger the route is there)."""
    if not view_says("hidden_from_strangers"):
        abort(401, detail, headers=INVALID_TOKEN)


def identify_caller() -> None:
    """A bearer request's caller is its token's user (or a 401); any other request's is
    whoever its session names, as Flask-Login finds them when asked."""
    text = bearer_of(current_request())
    if text is None:
        return
    g.session_unused = True  # no cookie is read, kept alive or set (sessions.py)
    if not well_formed(text, TOKEN_PREFIX):
        return refuse_token("This is not a token of this service.")
    if view_says("shows_roles"):  # its user's roles with it (a row per role: one token)
        rows = db.session.execute(TOKEN_BY_HASH_WITH_ROLES, {"hash": token_hash(text)}).all()
        keep_roles(rows)
        found = rows[0] if rows else None
    else:
        found = db.session.execute(TOKEN_BY_HASH, {"hash": token_hash(text)}).first()
    now = utcnow()
    if found is None or found.expires_at <= now:
        return refuse_token("This token is unknown, expired or revoked.")
    user, token_id, user_id, scopes, location_ids, _, last_used_at = found[:7]
    g.api_token = CallingToken(token_id, user_id, scopes, location_ids)
    g._login_user = user  # Flask-Login's slot: current_user is the token's user
    if last_used_at is None or now - last_used_at >= LAST_USE_EVERY:
        g.token_used = (token_id, now, request.remote_addr)


def note_use_once_answered(response: Response) -> Response:
    """The last use of this request's token, if due, is written once the answer is out."""
    used = current_globals().pop("token_used", None)
    if used is not None:
        app = current_application()
        response.call_on_close(lambda: note_use(app, *used))
    return response


def note_use(app: Flask, token_id: uuid.UUID, now: Any, ip: str | None) -> None:
    """Write when and from where a token was last used, at most once a minute however many
    requests use it (of two racing requests, the one whose condition still holds writes).
    It runs once the answer went out and the request's connection is back in the pool: it
    never needs a second connection, never delays an answer, and a failure (a busy
    SQLite, a database gone) costs this note alone."""
    try:
        with app.app_context():
            db.session.execute(
                update(ApiToken)
                .where(
                    ApiToken.id == token_id,
                    or_(
                        ApiToken.last_used_at.is_(None),
                        ApiToken.last_used_at < now - LAST_USE_EVERY,
                    ),
                )
                .values(last_used_at=now, last_used_ip=ip)
                .execution_options(synchronize_session=False)
            )
            db.session.commit()
    except (DBAPIError, PoolTimeoutError) as error:
        log.warning("a token's last use was not written: %s", type(error).__name__)


def calling_token() -> CallingToken | None:
    """The token this request came with, if it came with one."""
    return current_globals().get("api_token")


def granted(scopes: list[str] | tuple[str, ...]) -> set[str]:
    """Scopes and what they include."""
    return {*scopes, *(INCLUDED[Scope(s)] for s in scopes if s in INCLUDED)}


def check_token(scope: Scope | None, tokens: bool, location: Location | None) -> None:
    """403 when a token may not call this endpoint: one never may (`tokens=False`: its own
    kind, the password, the address, sign-out, sign-in), its scopes lack `scope`, or it is
    limited to locations and this endpoint acts at another one, or at none (a super's
    token limited to one place may not invite a super, create a location or read the whole
    audit log: its limit narrows, never stops at the path)."""
    token = calling_token()
    if token is None:
        return
    if not tokens:
        abort(403, "A token may not do this: sign in with a session.")
    if scope is not None and scope not in granted(token.scopes):
        abort(
            403,
            f"This token lacks the scope {scope}.",
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'},
        )
    if scope is not None and token.location_ids is not None:
        if location is None:
            abort(403, "This token is limited to locations: it may not act beyond them.")
        if not token.limited_to(location.id):
            abort(403, "This token is limited to other locations.")


def may_use(scope: Scope, location: Location | None = None) -> bool:
    """Whether the caller's token (if any) reaches `scope` (at `location`): for a view that
    shows more to staff, what a token without it sees is what the public sees."""
    token = calling_token()
    return token is None or (
        scope in granted(token.scopes) and (location is None or token.limited_to(location.id))
    )
