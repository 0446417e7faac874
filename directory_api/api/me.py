"""/me: the signed-in user's own account."""

from flask import Blueprint
from flask_login import current_user

from ..access import login_required
from ..schemas.users import UserOut

bp = Blueprint("me", __name__, url_prefix="/me")


@bp.get("/")
@login_required
def get_me():
    """The signed-in user, with their roles."""
    return UserOut().dump(current_user._get_current_object())
