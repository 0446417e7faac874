"""/locations/:slug/owners and /locations/:slug/admins: one piece of code, two roles.

Supers manage owners; owners (and supers) manage admins. Each member is a user seen through
their role at this location.
"""

import uuid
from typing import Any

from flask import Blueprint
from sqlalchemy import Select, select
from sqlalchemy.orm import selectinload

from ..access import check_may_edit_details
from ..credentials import Invitation, drop_invitation_if_roleless, invite
from ..endpoints import Access, Answer, endpoint
from ..errors import abort
from ..extensions import db
from ..models import GrantedRole, Location, Membership, Role, User
from ..pagination import ListArgs, Page, paginate, sort_fields
from ..schemas.users import ExistingUserOut, InviteIn, UserOut, UserUpdate
from .changes import apply_changes, created

UserArgs = ListArgs.sorted_by(sort_fields(User, "email"), default="email")
WITH_ROLES = (selectinload(User.memberships),)


class AtLocation:
    """A user seen through one location: the roles it shows are the ones held there."""

    def __init__(self, user: User, location: Location) -> None:
        self.user, self.location = user, location

    def __getattr__(self, name: str) -> Any:
        return getattr(self.user, name)

    @property
    def memberships(self) -> list[Membership]:
        return [m for m in self.user.memberships if m.location_id == self.location.id]


def invitation_answer(invitation: Invitation, user: Any, endpoint_name: str) -> Answer:
    """201 showing `user`. A user the invitation created is shown in full; an account that
    existed shows only its id, e-mail and status (API.md 9). A role waiting for consent has
    no address yet, so that answer names none."""
    shown = created(user, endpoint_name, user_id=invitation.user.id)
    if invitation.existed:
        shown.schema = ExistingUserOut
    if invitation.pending:
        shown.headers = {}
    return shown


def user_page(stmt: Select, args: dict[str, Any]) -> Page:
    """One page of users (owners, admins or supers), with their roles."""
    return paginate(stmt, args, options=WITH_ROLES)


def members_blueprint(role: Role, managed_by: Access) -> Blueprint:
    bp = Blueprint(f"{role.value}s", __name__, url_prefix=f"/locations/<slug:slug>/{role.value}s")
    noun = role.value

    def members(location: Location) -> Select:
        return (
            select(User)
            .join(Membership, Membership.user_id == User.id)
            .where(Membership.location_id == location.id, Membership.role == role)
        )

    def member_or_404(location: Location, user_id: uuid.UUID) -> User:
        user = db.session.scalar(members(location).where(User.id == user_id))
        if user is None:
            abort(404, f"No such {noun} at this location.")
        return user

    @bp.get("/")
    @endpoint(response=UserOut, query=UserArgs, paged=True, access=managed_by)
    def list_members(args, location: Location):
        """List the users holding this role at the location."""
        page = user_page(members(location), args)
        page.items = [AtLocation(user, location) for user in page.items]
        return page

    @bp.get("/id/<uuid:user_id>")
    @endpoint(response=UserOut, access=managed_by)
    def get_member(location: Location, user_id: uuid.UUID):
        """Get one user holding this role at the location."""
        return AtLocation(member_or_404(location, user_id), location)

    @bp.post("/")
    @endpoint(InviteIn, (UserOut, ExistingUserOut), status=201, access=managed_by, conflicts=True)
    def invite_member(data, location: Location):
        """Offer the role to an address: a new user is invited, an existing one asked to accept."""
        invitation = invite(data["email"], data.get("name"), GrantedRole(role), location)
        return invitation_answer(invitation, AtLocation(invitation.user, location), "get_member")

    @bp.put("/id/<uuid:user_id>")
    @endpoint(UserUpdate, UserOut, access=managed_by)
    def update_member(data, location: Location, user_id: uuid.UUID):
        """Change a member's name and phone."""
        user = member_or_404(location, user_id)
        check_may_edit_details(user)
        apply_changes(user, data)
        db.session.commit()
        return AtLocation(user, location)

    @bp.delete("/id/<uuid:user_id>")
    @endpoint(status=204, access=managed_by)
    def remove_member(location: Location, user_id: uuid.UUID):
        """Take the role away; the account stays."""
        user = member_or_404(location, user_id)
        db.session.delete(db.session.get(Membership, (user.id, location.id)))
        db.session.flush()
        drop_invitation_if_roleless(user)
        db.session.commit()

    return bp


owners = members_blueprint(Role.OWNER, Access.SUPER)
admins = members_blueprint(Role.ADMIN, Access.OWNER)
