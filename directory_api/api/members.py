"""/locations/:slug/owners and /locations/:slug/admins: one piece of code, two roles.

Supers manage owners; owners (and supers) manage admins. Each member is a user seen through
their role at this location.
"""

import uuid
from collections.abc import Callable

from flask import Blueprint, Response, url_for
from sqlalchemy import Select, select
from sqlalchemy.orm import selectinload

from ..access import require_location_role
from ..accounts import drop_invitation_if_roleless, invite
from ..bodies import load_body
from ..errors import abort
from ..extensions import db
from ..models import Location, Membership, Role, User
from ..openapi import spec
from ..pagination import ListArgs, page_response, parse_list_args, sort_fields
from ..schemas.users import InviteIn, UserOut, UserUpdate
from .common import apply_changes, created, no_content

SORTABLE = sort_fields(User, "email")


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

    def grant(location: Location) -> Callable[[User], None]:
        def add_role(user: User) -> None:
            membership = db.session.get(Membership, (user.id, location.id))
            if membership is None:
                db.session.add(Membership(user_id=user.id, location_id=location.id, role=role))
            elif membership.role == Role.OWNER and role == Role.ADMIN:
                abort(409, "This user is an owner here, which includes everything an admin may do.")
            elif membership.role == role and user.status == "active":
                abort(409, f"This user is already an {noun} here.")
            else:
                membership.role = role  # an admin promoted to owner, or an invitation resent

        return add_role

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
    @spec(body=InviteIn, response=UserOut, status=201, conflicts=True)
    def invite_member(location: Location):
        """Give the role to an address: a new user is invited, an existing one notified."""
        data = load_body(InviteIn())
        user = invite(
            data["email"], data.get("name"), f"{noun} of {location.name}", grant(location)
        )
        body = UserOut(location=location).dump(user)
        return created(body, url_for(".get_member", slug=location.slug, user_id=user.id))

    @bp.put("/id/<uuid:user_id>")
    @managed_by
    @spec(body=UserUpdate, response=UserOut)
    def update_member(location: Location, user_id: uuid.UUID):
        """Change a member's name and phone."""
        user = member_or_404(location, user_id)
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
