"""/supers: the privileged users; only supers see or change them."""

import uuid

from flask import Blueprint, url_for
from sqlalchemy import select

from ..access import check_may_edit_details, require_super
from ..bodies import load_body
from ..credentials import drop_invitation_if_roleless, invite
from ..errors import abort
from ..extensions import db
from ..models import GrantedRole, User, UserStatus
from ..openapi import spec
from ..pagination import ListArgs
from ..schemas.users import ExistingUserOut, InviteIn, UserOut, UserUpdate
from .common import apply_changes, get_or_404, no_content
from .members import SORTABLE, invitation_answer, user_page

bp = Blueprint("supers", __name__, url_prefix="/supers")

user_out, users_out = UserOut(), UserOut(many=True)


def super_or_404(user_id: uuid.UUID) -> User:
    return get_or_404(User, User.id == user_id, User.is_super.is_(True), what="super")


@bp.get("/")
@require_super
@spec(response=UserOut, query=ListArgs, paged=True, sortable=SORTABLE)
def list_supers():
    """List the supers."""
    return user_page(select(User).where(User.is_super.is_(True)), users_out)


@bp.get("/id/<uuid:user_id>")
@require_super
@spec(response=UserOut)
def get_super(user_id: uuid.UUID):
    """Get one super."""
    return user_out.dump(super_or_404(user_id))


@bp.post("/")
@require_super
@spec(body=InviteIn, response=(UserOut, ExistingUserOut), status=201, conflicts=True)
def invite_super():
    """Offer super rights to an address: a new user is invited, an existing one asked."""
    data = load_body(InviteIn())
    invitation = invite(data["email"], data.get("name"), GrantedRole.SUPER)
    url = url_for(".get_super", user_id=invitation.user.id)
    return invitation_answer(invitation, user_out, url)


@bp.put("/id/<uuid:user_id>")
@require_super
@spec(body=UserUpdate, response=UserOut)
def update_super(user_id: uuid.UUID):
    """Change a super's name and phone."""
    user = super_or_404(user_id)
    check_may_edit_details(user)
    apply_changes(user, load_body(UserUpdate()))
    db.session.commit()
    return user_out.dump(user)


@bp.delete("/id/<uuid:user_id>")
@require_super
@spec(status=204, conflicts=True)
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
    return no_content()
