"""Account changes shared by several endpoints: invitations, roles, passwords, sign-in."""

import time
from collections.abc import Callable

from flask import current_app, session
from flask_login import login_user
from sqlalchemy import select

from .extensions import db
from .models import Membership, TokenPurpose, User, utcnow
from .outbox import queue_mail
from .security import hash_password
from .sessions import TOUCHED_KEY
from .tokens import issue_token, void_tokens


def find_user_by_email(email: str) -> User | None:
    return db.session.scalar(select(User).where(User.email == email.lower()))


def invite(email: str, name: str | None, role_text: str, grant: Callable[[User], None]) -> User:
    """Give `email` a role: an unknown address becomes an invited user with an invitation
    mail; a still-invited user gets a fresh invitation; an active user gets a notice.

    `grant` adds the role to the user (and raises a 409 when it cannot).
    """
    user = find_user_by_email(email)
    if user is None:
        user = User(email=email, name=name)
        db.session.add(user)
        db.session.flush()
    grant(user)
    if user.status == "invited":
        token = issue_token(user, TokenPurpose.INVITATION, email=user.email)
        queue_mail(user.email, "invitation", user=user, role=role_text, token=token)
    else:
        queue_mail(user.email, "role_granted", user=user, role=role_text)
    db.session.commit()
    return user


def drop_invitation_if_roleless(user: User) -> None:
    """An invited user whose every role was taken away can no longer accept the invitation."""
    if user.status != "invited" or user.is_super:
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
    session[TOUCHED_KEY] = int(time.time())
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
