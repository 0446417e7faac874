"""/locations/:slug/owners and /locations/:slug/admins: one piece of code, two roles.

Supers manage owners; owners (and supers) manage admins. Each member is a user seen through
their role at this location.
"""

import uuid
from collections.abc import Callable

from flask import Blueprint, Response, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy import Select, select
from sqlalchemy.orm import selectinload

from ..access import check_may_edit_details, require_location_role
from ..bodies import load_body
from ..credentials import Invitation, drop_invitation_if_roleless, invite
from ..errors import abort
from ..extensions import db
from ..models import GrantedRole, Location, Membership, Role, User
from ..openapi import spec
from ..pagination import ListArgs, page_response, parse_list_args, sort_fields
from ..schemas.users import ExistingUserOut, InviteIn, UserOut, UserUpdate
from .common import apply_changes, created, no_content

SORTABLE = sort_fields(User, "email")
existing_user_out = ExistingUserOut()


def invitation_answer(invitation: Invitation, out: UserOut, location: str) -> ResponseReturnValue:
    """201. A user the invitation created is shown in full; an account that existed shows
    only its id, e-mail and status (API.md 9). A role waiting for consent has no address
    yet, so that answer names none."""
    user = invitation.user
    body = existing_user_out.dump(user) if invitation.existed else out.dump(user)
    if invitation.pending:
        return body, 201
    return created(body, location)


def user_page(stmt: Select, out: UserOut) -> Response:
    """One page of users (owners, admins or supers), sorted by e-mail by default."""
    return page_response(
        stmt,
        parse_list_args(),
        out.dump,
        sortable=SORTABLE,
        default_sort="email",
        tiebreak=User.id,
        options=(selectinload(User.memberships),),
    )


def members_blueprint(role: Role, managed_by: Callable) -> Blueprint:
    bp = Blueprint(f"{role.value}s", __name__, url_prefix=f"/locations/<slug:slug>/{role.value}s")
    noun = role.value

    def members(location: Location):
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
    @managed_by
    @spec(response=UserOut, query=ListArgs, paged=True, sortable=SORTABLE)
    def list_members(location: Location):
        """List the users holding this role at the location."""
        return user_page(members(location), UserOut(many=True, location=location))

    @bp.get("/id/<uuid:user_id>")
    @managed_by
    @spec(response=UserOut)
    def get_member(location: Location, user_id: uuid.UUID):
        """Get one user holding this role at the location."""
        return UserOut(location=location).dump(member_or_404(location, user_id))

    @bp.post("/")
    @managed_by
    @spec(body=InviteIn, response=(UserOut, ExistingUserOut), status=201, conflicts=True)
    def invite_member(location: Location):
        """Offer the role to an address: a new user is invited, an existing one asked to accept."""
        data = load_body(InviteIn())
        invitation = invite(data["email"], data.get("name"), GrantedRole(role), location)
        url = url_for(".get_member", slug=location.slug, user_id=invitation.user.id)
        return invitation_answer(invitation, UserOut(location=location), url)

    @bp.put("/id/<uuid:user_id>")
    @managed_by
    @spec(body=UserUpdate, response=UserOut)
    def update_member(location: Location, user_id: uuid.UUID):
        """Change a member's name and phone."""
        user = member_or_404(location, user_id)
        check_may_edit_details(user)
        apply_changes(user, load_body(UserUpdate()))
        db.session.commit()
        return UserOut(location=location).dump(user)

    @bp.delete("/id/<uuid:user_id>")
    @managed_by
    @spec(status=204)
    def remove_member(location: Location, user_id: uuid.UUID):
        """Take the role away; the account stays."""
        user = member_or_404(location, user_id)
        db.session.delete(db.session.get(Membership, (user.id, location.id)))
        db.session.flush()
        drop_invitation_if_roleless(user)
        db.session.commit()
        return no_content()

    return bp


owners = members_blueprint(Role.OWNER, require_location_role())  # supers only
admins = members_blueprint(Role.ADMIN, require_location_role(Role.OWNER))
