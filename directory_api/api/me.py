"""/me: the signed-in user's account, registration, password reset, e-mail change, role offers."""

import uuid

from flask import Blueprint, session
from flask_login import current_user

from .. import audit
from ..credentials import (
    find_user_by_email,
    give_role,
    issue_token,
    record_login,
    redeem_grant,
    redeem_token,
    reset_password,
    set_password,
    sign_in,
    verify_password,
    void_tokens,
)
from ..endpoints import Access, endpoint
from ..models import TokenPurpose, User, UserStatus
from ..models.api_token import Scope
from ..platform.errors import abort, invalid
from ..platform.extensions import db
from ..platform.limits import (
    email_update_per_account,
    login_per_ip,
    reset_per_email,
    reset_per_ip,
    token_endpoints,
)
from ..platform.outbox import queue_mail
from ..schemas.common import DetailOut
from ..schemas.passwords import password_problems
from ..schemas.users import (
    EmailUpdateIn,
    PasswordResetIn,
    PasswordResetStartIn,
    PasswordUpdateIn,
    RegisterIn,
    UserOut,
    UserUpdate,
)
from .changes import apply_changes
from .lookups import get_or_404

bp = Blueprint("me", __name__, url_prefix="/me")

RESET_STARTED = {"detail": "If the address belongs to an account, a reset link is on its way."}


def check_password_rules(password: str, email: str, field: str) -> None:
    problems = password_problems(password, email)
    if problems:
        invalid(field, problems)


def signed_in_user() -> User:
    return current_user._get_current_object()


@bp.get("/")
@endpoint(response=UserOut, access=Access.LOGIN)
def get_me():
    """The signed-in user, with their roles."""
    return signed_in_user()


# Its roles come with the user who asks, in one statement (access.with_roles); every other
# signed-in request reads the user's row alone.
get_me.shows_roles = True


@bp.put("/id/<uuid:user_id>")
@endpoint(UserUpdate, UserOut, access=Access.LOGIN, scope=Scope.MEMBERS_WRITE)
def update_user(data, user_id: uuid.UUID):
    """Change a user's name and phone: your own, or anyone's as a super."""
    if current_user.id != user_id and not current_user.is_super:
        abort(403, "You may only change your own details.")
    user = get_or_404(User, User.id == user_id, what="user")
    apply_changes(user, data)
    db.session.commit()
    return user


@bp.post("/register/<uuid:user_id>")
@endpoint(RegisterIn, UserOut, tokens=False, limits=(token_endpoints,))
def register(data, user_id: uuid.UUID):
    """Accept an invitation: set a password (and name) with the token from the e-mail."""
    user = db.session.get(User, user_id)
    token = redeem_token(data["token"], TokenPurpose.INVITATION)
    if (
        user is None
        or token is None
        or token.user_id != user.id
        or token.email != user.email
        or user.status != UserStatus.INVITED
    ):
        abort(404, "This invitation is invalid, used or expired.")
    check_password_rules(data["password"], user.email, "password")
    set_password(user, data["password"])
    if data.get("name"):
        user.name = data["name"]
    record_login(user)
    sign_in(user)
    audit.record("auth.login", target=user, actor=user)  # besides its password_change
    db.session.commit()
    return user


@bp.post("/password-reset")
@endpoint(PasswordResetStartIn, DetailOut, status=202, limits=(reset_per_ip, reset_per_email))
def start_password_reset(data):
    """Send a reset link to an active account; the answer never says whether one exists."""
    user = find_user_by_email(data["email"])
    if user is not None and user.status == UserStatus.ACTIVE:
        token = issue_token(user, TokenPurpose.PASSWORD_RESET)
        queue_mail(user.email, "password_reset", user=user, token=token)
        db.session.commit()
    return RESET_STARTED


@bp.post("/password-reset/<token>")
@endpoint(PasswordResetIn, status=204, limits=(token_endpoints,))
def complete_password_reset(data, token: str):
    """Set a new password with a reset token; every session of the account ends."""
    found = redeem_token(token, TokenPurpose.PASSWORD_RESET)
    user = db.session.get(User, found.user_id) if found else None
    if user is None or user.status != UserStatus.ACTIVE:
        abort(404, "This reset link is invalid, used or expired.")
    check_password_rules(data["password"], user.email, "password")
    reset_password(user, data["password"])
    queue_mail(user.email, "password_changed", user=user)
    db.session.commit()


@bp.post("/password-update")
@endpoint(PasswordUpdateIn, status=204, access=Access.LOGIN, tokens=False, limits=(login_per_ip,))
def update_password(data):
    """Change your password; your other sessions end, this one stays signed in."""
    user = signed_in_user()
    if not verify_password(user.password_hash, data["current_password"]):
        abort(403, "The current password is wrong.")
    check_password_rules(data["new_password"], user.email, "newPassword")
    remember = session.permanent
    set_password(user, data["new_password"])
    queue_mail(user.email, "password_changed", user=user)
    sign_in(user, remember=remember)
    db.session.commit()


@bp.post("/email-update")
@endpoint(
    EmailUpdateIn,
    DetailOut,
    status=202,
    access=Access.LOGIN,
    tokens=False,
    conflicts=True,
    limits=(login_per_ip, email_update_per_account),
)
def start_email_update(data):
    """Ask to change your e-mail address; the new address must confirm it."""
    user = signed_in_user()
    if not verify_password(user.password_hash, data["password"]):
        abort(403, "The password is wrong.")
    new_email = data["email"]
    if new_email == user.email:
        invalid("email", ["This is already your address."])
    if find_user_by_email(new_email) is not None:
        abort(409, "That e-mail address belongs to another account.")
    token = issue_token(user, TokenPurpose.EMAIL_UPDATE, email=new_email)
    queue_mail(new_email, "email_update_confirm", user=user, new_email=new_email, token=token)
    queue_mail(user.email, "email_update_requested", user=user, new_email=new_email)
    db.session.commit()
    return {"detail": "Confirm the change from the message sent to the new address."}


@bp.post("/email-update/<token>")
@endpoint(response=UserOut, conflicts=True, limits=(token_endpoints,))
def confirm_email_update(token: str):
    """Apply an e-mail change with the token sent to the new address."""
    found = redeem_token(token, TokenPurpose.EMAIL_UPDATE)
    user = db.session.get(User, found.user_id) if found else None
    if user is None or found.email is None:
        abort(404, "This confirmation link is invalid, used or expired.")
    taken_by = find_user_by_email(found.email)
    if taken_by is not None and taken_by.id != user.id:
        abort(409, "That e-mail address now belongs to another account.")
    old_email, user.email = user.email, found.email
    void_tokens(user, TokenPurpose.PASSWORD_RESET)
    queue_mail(old_email, "email_changed", user=user, new_email=user.email)
    db.session.commit()
    return user


@bp.post("/roles/accept/<token>")
@endpoint(
    response=UserOut, access=Access.LOGIN, scope=Scope.MEMBERS_WRITE, limits=(token_endpoints,)
)
def accept_role(token: str):
    """Accept a role offered to you by mail: you hold it from now on."""
    user = signed_in_user()
    grant = redeem_grant(token, user)
    if grant is None:  # another user's token as well: it stays usable by its own user
        abort(404, "This role offer is invalid, used, expired or not yours.")
    give_role(user, grant.role, grant.location_id)
    db.session.commit()
    return user
