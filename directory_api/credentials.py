"""Credentials, and the ways an account gets them: passwords, one-time tokens,
invitations and role offers, sign-in.

- Passwords are hashed with Argon2id (the cost from the ARGON2_* settings).
- One-time tokens (invitation, password reset, e-mail change) are 256 random bits, stored
  only as a SHA-256 hash, single-use and expiring; so are the tokens of pending role grants,
  which live in their own table.
- A role goes to an unknown address as an invitation; an existing account gets an offer it
  accepts once signed in (API.md 9), which works only while its maker could still make
  it, and which whoever may make it can list and withdraw (API.md 18).
- Signing in starts a fresh session; setting a password ends every other one.
"""

import hashlib
import hmac
import secrets
import time
import uuid
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from flask import Flask, current_app, session
from flask_login import login_user
from sqlalchemy import ColumnElement, Select, and_, bindparam, delete, func, select, update
from sqlalchemy.orm import joinedload
from sqlalchemy.orm.attributes import set_committed_value

from .models import (
    ApiToken,
    GrantedRole,
    Location,
    Membership,
    Role,
    RoleGrant,
    Token,
    TokenPurpose,
    User,
    UserStatus,
    utcnow,
)
from .platform.bearer import new_token as new_api_token
from .platform.bearer import shown_part, token_hash
from .platform.email_addresses import normalize_email
from .platform.errors import abort, invalid
from .platform.extensions import db
from .platform.outbox import queue_mail
from .platform.sessions import SIGNED_IN_KEY, TOUCHED_KEY
from .platform.with_commit import WAITS

# Passwords: Argon2id


def init_password_hasher(app: Flask) -> None:
    hasher = PasswordHasher(
        time_cost=app.config["ARGON2_TIME_COST"],
        memory_cost=app.config["ARGON2_MEMORY_COST"],
        parallelism=app.config["ARGON2_PARALLELISM"],
    )
    app.extensions["password_hasher"] = hasher
    # Checked against when the account is unknown, so a miss costs as much as a hit.
    app.extensions["dummy_password_hash"] = hasher.hash(secrets.token_urlsafe(16))


def _hasher() -> PasswordHasher:
    return current_app.extensions["password_hasher"]


def hash_password(password: str) -> str:
    return _hasher().hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when `password` matches; with no hash, still spends one verification."""
    try:
        return (
            _hasher().verify(
                password_hash or current_app.extensions["dummy_password_hash"], password
            )
            and password_hash is not None
        )
    except (VerificationError, InvalidHashError):
        return False


def password_needs_rehash(password_hash: str) -> bool:
    return _hasher().check_needs_rehash(password_hash)


# One-time tokens


LIFETIMES = {
    TokenPurpose.INVITATION: timedelta(days=7),
    TokenPurpose.PASSWORD_RESET: timedelta(hours=1),
    TokenPurpose.EMAIL_UPDATE: timedelta(hours=24),
}
# A role offered to an existing account waits as long as an invitation does.
GRANT_LIFETIME = timedelta(days=7)

Redeemable = TypeVar("Redeemable", Token, RoleGrant)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A 256-bit URL-safe token and the hash that is stored in its place."""
    token = secrets.token_urlsafe(32)
    return token, hash_token(token)


def void_tokens(user: User, purpose: TokenPurpose) -> None:
    """Unused tokens of this purpose stop working (a newer one was issued, or they are moot)."""
    db.session.execute(
        delete(Token).where(
            Token.user_id == user.id, Token.purpose == purpose, Token.used_at.is_(None)
        )
    )


def issue_token(user: User, purpose: TokenPurpose, email: str | None = None) -> str:
    """A new token for `user`, voiding older unused ones; returns the only copy of it."""
    void_tokens(user, purpose)
    return _add_with_token(
        Token(
            user_id=user.id, purpose=purpose, email=email, expires_at=utcnow() + LIFETIMES[purpose]
        )
    )


def _add_with_token(row: Redeemable) -> str:
    """Give `row` a new token's hash and add it; returns the only copy of the token."""
    token, row.token_hash = new_token()
    db.session.add(row)
    return token


def presented_hash(token: str) -> str | None:
    """The hash to look a presented token up by; None for what no issued token can be
    (empty, or longer than any), so nothing is hashed or queried for it."""
    return hash_token(token) if token and len(token) <= 200 else None


def unspent(model: type[Redeemable]) -> ColumnElement[bool]:
    """Neither used nor expired."""
    return and_(model.used_at.is_(None), model.expires_at > utcnow())


def _redeem(model: type[Redeemable], token: str, *criteria: Any) -> Redeemable | None:
    """The row of `model` matching `token` and `criteria` (which say what makes it live),
    marked used; else None."""
    token_hash = presented_hash(token)
    if token_hash is None:
        return None
    found = db.session.scalar(
        select(model).where(model.token_hash == token_hash, *criteria).with_for_update()
    )
    if found is None or not hmac.compare_digest(found.token_hash, token_hash):
        return None
    found.used_at = utcnow()
    return found


def redeem_token(token: str, purpose: TokenPurpose) -> Token | None:
    """The live token matching `token`, marked used; None for unknown, used or expired ones."""
    return _redeem(Token, token, unspent(Token), Token.purpose == purpose)


def live_offer() -> ColumnElement[bool]:
    """Whether a pending grant still works: unused, unexpired, and its maker still holds the
    right to make it. The one rule that accepting, listing and withdrawing offers read."""
    return and_(unspent(RoleGrant), RoleGrant.maker_entitled())


def issue_grant(
    user: User, role: GrantedRole, location_id: uuid.UUID | None, offered_by: User
) -> str:
    """A pending grant of `role` (at a location; none for a super) for `user`, made by
    `offered_by`, replacing an unused one for the same role and place; returns the only
    copy of its token."""
    db.session.execute(
        delete(RoleGrant).where(
            RoleGrant.user_id == user.id,
            RoleGrant.role == role,
            RoleGrant.location_id == location_id,  # IS NULL for a super grant
            RoleGrant.used_at.is_(None),
        )
    )
    return _add_with_token(
        RoleGrant(
            user_id=user.id,
            location_id=location_id,
            role=role,
            expires_at=utcnow() + GRANT_LIFETIME,
            offered_by=offered_by.id,
        )
    )


def redeem_grant(token: str, user: User) -> RoleGrant | None:
    """The live grant for `user` matching `token`, marked used. Another user's token is
    None and stays usable by its own user."""
    return _redeem(RoleGrant, token, live_offer(), RoleGrant.user_id == user.id)


def live_offers(role: GrantedRole, location_id: uuid.UUID | None) -> Select:
    """The live offers of `role` at a location (none for a super)."""
    return select(RoleGrant).where(
        RoleGrant.role == role,
        RoleGrant.location_id == location_id,  # IS NULL for a super grant
        live_offer(),
    )


def withdraw_offer(role: GrantedRole, location_id: uuid.UUID | None, user_id: uuid.UUID) -> bool:
    """Delete the live offer of `role` at a location (none for a super) to the user
    `user_id`, so its token no longer works (audited as `<role>.withdraw`); False when
    there is none."""
    offer = db.session.scalar(
        live_offers(role, location_id).where(RoleGrant.user_id == user_id).with_for_update()
    )
    if offer is None:
        return False
    db.session.delete(offer)
    return True


# Accounts: invitations, role offers and roles


# Built once: the account of an address, as normalised (`email_of`).
USER_BY_EMAIL = select(User).where(User.email == bindparam("email"))


def email_of(address: str) -> dict[str, str]:
    """USER_BY_EMAIL's parameter for `address`."""
    return {"email": normalize_email(address)}


def find_user_by_email(email: str) -> User | None:
    """The account of an address (as normalised)."""
    return db.session.scalar(USER_BY_EMAIL, email_of(email))


class Invitation(NamedTuple):
    user: User
    existed: bool  # the account was there before: the inviter sees only id, e-mail, status
    pending: bool  # the role waits for the user to accept it (a pending grant)


def describe_role(role: GrantedRole, location: Location | None) -> str:
    return "a super" if location is None else f"{role.value} of {location.name}"


def role_held(user: User, role: GrantedRole, location_id: uuid.UUID | None) -> str | None:
    """What `user` holds where `role` would go: "super", "owner", "admin" or None."""
    if role == GrantedRole.SUPER:
        return GrantedRole.SUPER.value if user.is_super else None
    held = db.session.get(Membership, (user.id, location_id))
    return held.role.value if held is not None else None


def refuse_held_role(user: User, role: GrantedRole, location_id: uuid.UUID | None) -> None:
    """409 when `user` already holds `role` there, or a role that includes it."""
    held = role_held(user, role, location_id)
    if held == Role.OWNER.value and role == GrantedRole.ADMIN:
        abort(409, "This user is an owner here, which includes everything an admin may do.")
    if held == role.value and user.status == UserStatus.ACTIVE:
        if role == GrantedRole.SUPER:
            abort(409, "This user is already a super.")
        abort(409, f"This user is already an {role.value} here.")


def give_role(user: User, role: GrantedRole, location_id: uuid.UUID | None) -> None:
    """Add the role; a role held there already that includes it stays (owner supersedes
    admin), and an admin offered ownership becomes the owner."""
    if role == GrantedRole.SUPER:
        user.is_super = True
        return
    held = db.session.get(Membership, (user.id, location_id))
    if held is None:
        db.session.add(Membership(user_id=user.id, location_id=location_id, role=Role(role)))
    elif role == GrantedRole.OWNER:
        held.role = Role.OWNER


def invite(
    email: str, name: str | None, role: GrantedRole, location: Location | None, by: User
) -> Invitation:
    """`by` offers `role` (at `location`; none for a super) to `email`.

    An unknown address becomes an invited user who holds the role at once and gets an
    invitation mail. An account that exists is never pulled in without consent (API.md 9):
    it gets a pending grant, which works while `by` could still make it, and a mail with
    the link that accepts it once signed in (a still-invited account registers through its
    invitation first). The one exception is a still-invited account invited again to a
    role it already holds: that resends its invitation (a fresh link). An account that
    existed keeps its name, and the inviter is shown only its id, e-mail and status.
    """
    user = find_user_by_email(email)
    existed = user is not None
    if user is None:
        user = User(email=email, name=name)
        db.session.add(user)
        db.session.flush()
    location_id = location.id if location is not None else None
    refuse_held_role(user, role, location_id)
    text = describe_role(role, location)
    renewal = (
        existed
        and user.status == UserStatus.INVITED
        and role_held(user, role, location_id) == role.value
    )
    pending = existed and not renewal
    if pending:
        token = issue_grant(user, role, location_id, by)
        queue_mail(user.email, "role_offer", user=user, role=text, token=token)
    else:
        give_role(user, role, location_id)
        token = issue_token(user, TokenPurpose.INVITATION, email=user.email)
        queue_mail(user.email, "invitation", user=user, role=text, token=token)
    db.session.commit()
    return Invitation(user, existed, pending)


def drop_invitation_if_roleless(user: User) -> None:
    """An invited user whose every role was taken away can no longer accept the invitation."""
    if user.status != UserStatus.INVITED or user.is_super:
        return
    has_role = db.session.scalar(select(Membership.user_id).where(Membership.user_id == user.id))
    if has_role is None:
        void_tokens(user, TokenPurpose.INVITATION)


# Sign-in and password changes


def sign_in(user: User, *, remember: bool = False) -> None:
    """Start a fresh session for `user` with a new session id (no fixation).

    The session is stored at once: call this before committing, so that a session store
    that fails (503) leaves the database as it was.
    """
    session.clear()
    login_user(user)
    session.permanent = remember
    # The sign-in time ends the session SESSION_MAX_LIFETIME later, however active.
    session[TOUCHED_KEY] = session[SIGNED_IN_KEY] = int(time.time())
    current_app.session_interface.regenerate(session)
    current_app.session_interface.save_now(session)


def set_password(user: User, password: str) -> None:
    """Store a new password: every other session, reset link and pending e-mail change
    stops working (a password change is how a user locks out someone who had it)."""
    user.password_hash = hash_password(password)
    user.rotate_session_token()
    for purpose in (TokenPurpose.PASSWORD_RESET, TokenPurpose.EMAIL_UPDATE):
        void_tokens(user, purpose)


def reset_password(user: User, password: str) -> None:
    """A password set through a reset link: as `set_password`, and every API token of the
    account revoked (whoever had the old password may have made some)."""
    set_password(user, password)
    revoke_api_tokens(ApiToken.user_id == user.id)


# Built once, its values bound: nothing reads what it changed, so it may wait for the commit.
LOGGED_IN = (
    update(User.__table__)
    .where(User.__table__.c.id == bindparam("user_id"))
    .values(last_login_at=bindparam("now"), updated_at=bindparam("now"))
    .execution_options(**WAITS)
)


def record_login(user: User) -> None:
    """Note the sign-in's time: a statement of its own, which a sign-in sends with its audit
    entry and BEGIN (platform/with_commit.py), known to the session as written (the answer
    shows it without reading the row again)."""
    now = utcnow()
    db.session.execute(LOGGED_IN, {"user_id": user.id, "now": now})
    for name in ("last_login_at", "updated_at"):
        set_committed_value(user, name, now)


# Personal API tokens (API.md 14).
MAX_LIVE_API_TOKENS = 50


def live_api_tokens() -> ColumnElement[bool]:
    return and_(ApiToken.revoked_at.is_(None), ApiToken.expires_at > utcnow())


def locations_for_token(user: User, slugs: list[str] | None) -> list[Location] | None:
    """The locations a new token of `user` is limited to: each must exist and be one the
    user has access to (a super has access everywhere); 422 naming those that are not."""
    if slugs is None:
        return None
    found = {
        location.slug: location
        for location in db.session.scalars(select(Location).where(Location.slug.in_(slugs)))
    }
    if not user.is_super:
        held = set(
            db.session.scalars(select(Membership.location_id).where(Membership.user_id == user.id))
        )
        found = {slug: location for slug, location in found.items() if location.id in held}
    if refused := sorted(set(slugs) - set(found)):
        invalid("locations", f"No location you have access to: {', '.join(refused)}.")
    return [found[slug] for slug in dict.fromkeys(slugs)]


def create_api_token(user: User, data: dict[str, Any], prefix: str) -> ApiToken:
    """A new token for `user` (their password checked by the view), its secret on
    `secret` for the one answer that shows it, and the mail that tells them."""
    locations = locations_for_token(user, data.get("locations"))
    live = db.session.scalar(
        select(func.count())
        .select_from(ApiToken)
        .where(ApiToken.user_id == user.id, live_api_tokens())
    )
    if live >= MAX_LIVE_API_TOKENS:
        abort(409, f"You have {MAX_LIVE_API_TOKENS} live tokens: revoke one first.")
    secret = new_api_token(prefix)
    now = utcnow()
    token = ApiToken(
        user_id=user.id,
        name=data["name"],
        token_hash=token_hash(secret),
        prefix=shown_part(secret),
        scopes=sorted(set(data["scopes"])),
        location_ids=None if locations is None else [str(location.id) for location in locations],
        created_at=now,
        expires_at=now + timedelta(days=data["expires_in_days"]),
    )
    db.session.add(token)
    token.secret = secret
    token.location_slugs = None if locations is None else [location.slug for location in locations]
    queue_mail(user.email, "token_created", user=user, token=token)
    return token


def revoke_api_tokens(*criteria: Any) -> list[ApiToken]:
    """Revoke the live tokens that meet `criteria`, through the session (each one audited)."""
    tokens = db.session.scalars(select(ApiToken).where(live_api_tokens(), *criteria)).all()
    now = utcnow()
    for token in tokens:
        token.revoked_at = now
    return list(tokens)


def with_location_slugs(tokens: Any) -> Any:
    """`tokens` with the slugs of the locations each is limited to (one statement for all;
    a deleted location is left out, and the limit stays: it matches nothing)."""
    ids = {uuid.UUID(i) for token in tokens for i in (token.location_ids or ())}
    slugs: dict[uuid.UUID, str] = {}
    if ids:
        rows = db.session.execute(select(Location.id, Location.slug).where(Location.id.in_(ids)))
        slugs = {location_id: slug for location_id, slug in rows}
    for token in tokens:
        if token.location_ids is None:
            token.location_slugs = None
        else:
            token.location_slugs = sorted(
                slugs[uuid.UUID(i)] for i in token.location_ids if uuid.UUID(i) in slugs
            )
    return tokens


EXPIRY_NOTICE = timedelta(days=7)


def notice_expiring_tokens(now: Any = None) -> int:
    """Mail each user whose live token expires within a week, once per token. A token is
    claimed by an atomic update before its mail is queued (in the same transaction), so
    several workers never mail one twice. Returns how many were mailed."""
    now = now or utcnow()
    due = db.session.scalars(
        select(ApiToken)
        .where(
            live_api_tokens(),
            ApiToken.expires_at <= now + EXPIRY_NOTICE,
            ApiToken.expiry_noticed_at.is_(None),
        )
        .options(joinedload(ApiToken.user))
    ).all()
    mailed = 0
    for token in due:
        claimed = db.session.execute(
            update(ApiToken)
            .where(ApiToken.id == token.id, ApiToken.expiry_noticed_at.is_(None))
            .values(expiry_noticed_at=now)
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount == 1:
            queue_mail(token.user.email, "token_expiring", user=token.user, token=token)
            mailed += 1
    db.session.commit()
    return mailed
