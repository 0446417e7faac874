"""/locations/:slug/owners and /locations/:slug/admins: one piece of code, two roles.

Supers manage owners; owners (and supers) manage admins. Each member is a user seen through
their role at this location. Whoever may offer a role sees and withdraws its pending offers
(`…/pending/`, shared with /supers: `offer_routes`).
"""

import uuid
from typing import Any

from flask import Blueprint
from flask_login import current_user
from sqlalchemy import Select, select
from sqlalchemy.orm import selectinload

from ..access import check_may_edit_details
from ..credentials import (
    Invitation,
    drop_invitation_if_roleless,
    invite,
    live_offers,
    withdraw_offer,
)
from ..endpoints import Access, Answer, endpoint
from ..models import GrantedRole, Location, Membership, Role, RoleGrant, User
from ..models.api_token import Scope
from ..platform.errors import abort
from ..platform.extensions import db
from ..platform.output import schema_instance
from ..platform.page_queries import encoded_by_id, paginate
from ..platform.pagination import ListArgs, Page, sort_fields
from ..platform.sql import json_of, json_text
from ..schemas.users import ExistingUserOut, InviteIn, PendingOfferOut, UserOut, UserUpdate
from .changes import apply_changes, created

UserArgs = ListArgs.sorted_by(sort_fields(User, "email"), default="email")
WITH_ROLES = (selectinload(User.memberships),)
OfferArgs = ListArgs.sorted_by(
    {"email": User.email, "offeredAt": RoleGrant.created_at, "expiresAt": RoleGrant.expires_at},
    default="email",
)
# A page of offers as its output, written by the database with each offered user's address
# (sql.json_of): built once.
_grants, _users = RoleGrant.__table__, User.__table__
OFFERS_OUTPUT = encoded_by_id(
    select(
        json_text(json_of(schema_instance(PendingOfferOut), {**_grants.c, "email": _users.c.email}))
    ).select_from(_grants.join(_users, _users.c.id == _grants.c.user_id)),
    _grants.c.id,
)


class AtLocation:
    """A user seen through one location: the roles it shows are the ones held there."""

    roles_read = None  # never the user's own (User.roles_read): `memberships` below

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


def offer_routes(bp: Blueprint, role: GrantedRole, access: Access) -> None:
    """GET …/pending/ and DELETE …/pending/id/:id on `bp`: the live offers of `role` (at
    the path's location; none for a super), for those with `access`, who may make them."""

    def place(location: Location | None) -> uuid.UUID | None:
        return location.id if location is not None else None

    @bp.get("/pending/")
    @endpoint(
        response=PendingOfferOut,
        query=OfferArgs,
        paged=True,
        access=access,
        scope=Scope.MEMBERS_READ,
    )
    def list_pending(args, location: Location | None = None):
        """List the offers of this role that still work: unused, unexpired, not void."""
        stmt = live_offers(role, place(location)).join(User, User.id == RoleGrant.user_id)
        return paginate(stmt, args, encoded=OFFERS_OUTPUT)

    @bp.delete("/pending/id/<uuid:user_id>")
    @endpoint(status=204, access=access, scope=Scope.MEMBERS_WRITE)
    def withdraw_pending(user_id: uuid.UUID, location: Location | None = None):
        """Withdraw the offer of this role to a user: its link stops working."""
        if not withdraw_offer(role, place(location), user_id):
            abort(404, f"No pending {role.value} offer to this user here.")
        db.session.commit()


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
    @endpoint(
        response=UserOut, query=UserArgs, paged=True, access=managed_by, scope=Scope.MEMBERS_READ
    )
    def list_members(args, location: Location):
        """List the users holding this role at the location."""
        page = user_page(members(location), args)
        page.items = [AtLocation(user, location) for user in page.items]
        return page

    @bp.get("/id/<uuid:user_id>")
    @endpoint(response=UserOut, access=managed_by, scope=Scope.MEMBERS_READ)
    def get_member(location: Location, user_id: uuid.UUID):
        """Get one user holding this role at the location."""
        return AtLocation(member_or_404(location, user_id), location)

    @bp.post("/")
    @endpoint(
        InviteIn,
        (UserOut, ExistingUserOut),
        status=201,
        access=managed_by,
        scope=Scope.MEMBERS_WRITE,
        conflicts=True,
    )
    def invite_member(data, location: Location):
        """Offer the role to an address: a new user is invited, an existing one asked to accept."""
        invitation = invite(
            data["email"], data.get("name"), GrantedRole(role), location, current_user
        )
        return invitation_answer(invitation, AtLocation(invitation.user, location), "get_member")

    @bp.put("/id/<uuid:user_id>")
    @endpoint(UserUpdate, UserOut, access=managed_by, scope=Scope.MEMBERS_WRITE)
    def update_member(data, location: Location, user_id: uuid.UUID):
        """Change a member's name and phone."""
        user = member_or_404(location, user_id)
        check_may_edit_details(user)
        apply_changes(user, data)
        db.session.commit()
        return AtLocation(user, location)

    @bp.delete("/id/<uuid:user_id>")
    @endpoint(status=204, access=managed_by, scope=Scope.MEMBERS_WRITE)
    def remove_member(location: Location, user_id: uuid.UUID):
        """Take the role away; the account stays."""
        user = member_or_404(location, user_id)
        db.session.delete(db.session.get(Membership, (user.id, location.id)))
        db.session.flush()
        drop_invitation_if_roleless(user)
        db.session.commit()

    offer_routes(bp, GrantedRole(role), managed_by)
    return bp


owners = members_blueprint(Role.OWNER, Access.SUPER)
admins = members_blueprint(Role.ADMIN, Access.OWNER)
