"""Account changes shared by several endpoints: invitations, roles, passwords, sign-in."""

import time
import uuid
from typing import NamedTuple

from flask import current_app, session
from flask_login import login_user
from sqlalchemy import select

from .errors import abort
from .extensions import db
from .models import GrantedRole, Location, Membership, Role, TokenPurpose, User, UserStatus, utcnow
from .outbox import queue_mail
from .schemas.base import normalize_email
from .security import hash_password
from .sessions import SIGNED_IN_KEY, TOUCHED_KEY
from .tokens import issue_grant, issue_token, void_tokens


def find_user_by_email(email: str) -> User | None:
    return db.session.scalar(select(User).where(User.email == normalize_email(email)))


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
    email: str, name: str | None, role: GrantedRole, location: Location | None = None
) -> Invitation:
    """Offer `role` (at `location`; none for a super) to `email`.

    An unknown address becomes an invited user who holds the role at once and gets an
    invitation mail. An account that exists is never pulled in without consent (API.md 9):
    it gets a pending grant and a mail with the link that accepts it once signed in (a
    still-invited account registers through its invitation first). The one exception is a
    still-invited account invited again to a role it already holds: that resends its
    invitation (a fresh link). An account that existed keeps its name, and the inviter is
    shown only its id, e-mail and status.
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
        token = issue_grant(user, role, location_id)
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


def record_login(user: User) -> None:
    user.last_login_at = utcnow()
