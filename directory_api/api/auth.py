"""/auth: sign in and out with a server-side session cookie."""

import time

from flask import Blueprint, current_app, request, session
from flask_limiter.util import get_remote_address
from flask_login import login_user, logout_user
from sqlalchemy import select

from ..access import login_required
from ..bodies import load_body
from ..errors import abort
from ..extensions import db, limiter
from ..models import User, utcnow
from ..schemas.users import LoginIn, UserOut
from ..security import hash_password, password_needs_rehash, verify_password
from ..sessions import TOUCHED_KEY
from .common import no_content

bp = Blueprint("auth", __name__, url_prefix="/auth")


def login_email_key() -> str:
    """Rate-limit key: the e-mail being tried, so one account can't be guessed from many IPs."""
    body = request.get_json(silent=True)
    email = body.get("email") if isinstance(body, dict) else None
    if isinstance(email, str) and email.strip():
        return "email:" + email.strip().lower()[:254]
    return "ip:" + get_remote_address()


@bp.post("/login")
@limiter.limit(lambda: current_app.config["RATELIMIT_LOGIN_PER_IP"])
@limiter.limit(lambda: current_app.config["RATELIMIT_LOGIN_PER_EMAIL"], key_func=login_email_key)
def login():
    """Sign in; answers the user and sets the session cookie."""
    data = load_body(LoginIn())
    user = db.session.scalar(select(User).where(User.email == data["email"].lower()))
    # Unknown, wrong and not-yet-registered all cost one hash check and get the same answer.
    if not verify_password(user.password_hash if user else None, data["password"]):
        abort(401, "Wrong e-mail or password.")
    if password_needs_rehash(user.password_hash):
        user.password_hash = hash_password(data["password"])
    user.last_login_at = utcnow()
    db.session.commit()

    session.clear()
    login_user(user)
    session.permanent = data["remember"]
    session[TOUCHED_KEY] = int(time.time())
    # A new session id: a cookie planted before sign-in is not signed in afterwards.
    current_app.session_interface.regenerate(session)
    return UserOut().dump(user)


@bp.post("/logout")
@login_required
def logout():
    """Sign out; the server forgets the session, so a copied cookie stops working."""
    logout_user()
    session.clear()
    return no_content()
