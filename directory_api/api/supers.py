"""/supers: the privileged users; only supers see or change them, or offer super rights."""

import uuid

from flask import Blueprint
from flask_login import current_user
from sqlalchemy import select

from ..access import check_may_edit_details
from ..credentials import drop_invitation_if_roleless, invite
from ..endpoints import Access, endpoint
from ..models import GrantedRole, User, UserStatus
from ..models.api_token import Scope
from ..platform.errors import abort
from ..platform.extensions import db
from ..schemas.users import ExistingUserOut, InviteIn, UserOut, UserUpdate
from .changes import apply_changes
from .lookups import get_or_404
from .members import UserArgs, invitation_answer, offer_routes, user_page

bp = Blueprint("supers", __name__, url_prefix="/supers")


def super_or_404(user_id: uuid.UUID) -> User:
    return get_or_404(User, User.id == user_id, User.is_super.is_(True), what="super")


@bp.get("/")
@endpoint(
    response=UserOut, query=UserArgs, paged=True, access=Access.SUPER, scope=Scope.MEMBERS_READ
)
def list_supers(args):
    """List the supers."""
    return user_page(select(User).where(User.is_super.is_(True)), args)


@bp.get("/id/<uuid:user_id>")
@endpoint(response=UserOut, access=Access.SUPER, scope=Scope.MEMBERS_READ)
def get_super(user_id: uuid.UUID):
    """Get one super."""
    return super_or_404(user_id)


@bp.post("/")
@endpoint(
    InviteIn,
    (UserOut, ExistingUserOut),
    status=201,
    access=Access.SUPER,
    scope=Scope.MEMBERS_WRITE,
    conflicts=True,
)
def invite_super(data):
    """Offer super rights to an address: a new user is invited, an existing one asked."""
    invitation = invite(data["email"], data.get("name"), GrantedRole.SUPER, None, current_user)
    return invitation_answer(invitation, invitation.user, "get_super")


@bp.put("/id/<uuid:user_id>")
@endpoint(UserUpdate, UserOut, access=Access.SUPER, scope=Scope.MEMBERS_WRITE)
def update_super(data, user_id: uuid.UUID):
    """Change a super's name and phone."""
    user = super_or_404(user_id)
    check_may_edit_details(user)
    apply_changes(user, data)
    db.session.commit()
    return user


@bp.delete("/id/<uuid:user_id>")
@endpoint(status=204, access=Access.SUPER, scope=Scope.MEMBERS_WRITE, conflicts=True)
def revoke_super(user_id: uuid.UUID):
    """Take super rights away (the account stays); the last active super cannot go."""
    user = super_or_404(user_id)
    # Locked, so two supers revoking each other at once cannot both succeed.
    active_supers = db.session.scalars(
        select(User.id)
        .where(User.is_super.is_(True), User.status == UserStatus.ACTIVE)
        .with_for_update()
    ).all()
    if user.status == UserStatus.ACTIVE and set(active_supers) <= {user.id}:
        abort(409, "This is the last active super; invite another one first.")
    user.is_super = False
    drop_invitation_if_roleless(user)
    db.session.commit()


offer_routes(bp, GrantedRole.SUPER, Access.SUPER)
