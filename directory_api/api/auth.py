"""/auth: sign in and out with a server-side session cookie."""

from flask import Blueprint, session
from flask_login import current_user, logout_user

from .. import audit
from ..access import keep_roles, with_roles
from ..credentials import (
    USER_BY_EMAIL,
    email_of,
    hash_password,
    password_needs_rehash,
    record_login,
    sign_in,
    verify_password,
)
from ..endpoints import Access, endpoint
from ..gauges import SIGN_INS
from ..platform.errors import abort
from ..platform.extensions import commit_keeping_state, db
from ..platform.limits import login_per_email, login_per_ip
from ..platform.metrics import count
from ..schemas.users import LoginIn, UserOut

bp = Blueprint("auth", __name__, url_prefix="/auth")

# Built once: the account signing in, with the roles its answer shows (a row per role).
SIGNING_IN = with_roles(USER_BY_EMAIL)


@bp.post("/login")
@endpoint(
    LoginIn,
    UserOut,
    limits=(login_per_ip, login_per_email),
    tokens=False,  # a session is made by a password, never by a token
    failures={401: "Wrong e-mail or password."},
    # The account is read and its password checked before any transaction; the last
    # sign-in and the audit entry go with BEGIN in one round trip, then COMMIT.
    writes_with_commit=True,
)
def login(data):
    """Sign in; answers the user and sets the session cookie."""
    user = keep_roles(db.session.execute(SIGNING_IN, email_of(data["email"])).all())
    # Unknown, wrong and not-yet-registered all cost one hash check and get the same answer.
    if not verify_password(user.password_hash if user else None, data["password"]):
        audit.record("auth.login_failed", target=user)  # kept: the 401 rolls nothing back
        db.session.commit()
        count(SIGN_INS, "failed")
        abort(401, "Wrong e-mail or password.")
    if password_needs_rehash(user.password_hash):
        user.password_hash = hash_password(data["password"])
    record_login(user)
    sign_in(user, remember=data["remember"])
    audit.record("auth.login", target=user, actor=user, sign_in=True)
    commit_keeping_state()  # the answer is what was just written: not read again
    count(SIGN_INS, "succeeded")
    return user


@bp.post("/logout")
@endpoint(status=204, access=Access.LOGIN, tokens=False)
def logout():
    """Sign out; the server forgets the session, so a copied cookie stops working."""
    user = current_user._get_current_object()
    audit.record("auth.logout", target=user, actor=user)
    db.session.commit()
    logout_user()
    session.clear()
