"""/locations: anyone reads; supers create, change and delete; owners change the basics."""

import uuid
from typing import Any

from flask import Blueprint
from flask_login import current_user
from sqlalchemy import Select, select

from ..credentials import drop_invitation_if_roleless
from ..endpoints import Access, endpoint
from ..models import Business, Employer, Location, Membership, Region, User, UserStatus, Vote
from ..models.api_token import Scope
from ..platform.errors import abort
from ..platform.extensions import db
from ..platform.outbox import forget_messages_about
from ..platform.page_queries import paginate
from ..platform.pagination import sort_fields
from ..schemas.locations import (
    OWNER_FIELDS,
    LocationIn,
    LocationListArgs,
    LocationOut,
    LocationUpdate,
)
from ..vote_integrity import location_mail
from .changes import create_named, refuse_if_used, update_named
from .lookups import by_slug_or_422, get_or_404, id_by_slug, named_by_path

bp = Blueprint("locations", __name__, url_prefix="/locations")
# /locations/slug/… and /locations/id/… are lookups, so no location may be called that.
RESERVED_SLUGS = frozenset({"slug", "id"})
# Attribute name → the name clients use.
FIELD_NAMES = {name: field.data_key or name for name, field in LocationIn().fields.items()}


def filter_locations(stmt: Select, args: dict[str, Any]) -> Select:
    if "directory_location" in args:
        stmt = stmt.where(Location.directory_location.is_(args["directory_location"]))
    if "region" in args:
        stmt = stmt.where(Location.region_id == id_by_slug(Region, args["region"]))
    return stmt


LocationArgs = LocationListArgs.sorted_by(sort_fields(Location), default="name")


@bp.get("/", endpoint="list")
@endpoint(response=LocationOut, query=LocationArgs, paged=True)
def list_locations(args):
    """List the locations (paged, sortable; filter by `region`, `directoryLocation`)."""
    return paginate(filter_locations(select(Location), args), args)


@bp.get("/slug/<slug:item_slug>", endpoint="get_by_slug")
@bp.get("/id/<uuid:item_id>", endpoint="get_by_id")
@endpoint(response=LocationOut)
def get_location(item_slug: str | None = None, item_id: uuid.UUID | None = None):
    """Get one location by slug or by id."""
    return get_or_404(Location, named_by_path(Location, item_slug, item_id), what="location")


def resolve_region(data: dict[str, Any]) -> None:
    """Replace the region slug in `data` by the region (422 when there is no such region)."""
    if data.get("region") is not None:
        data["region"] = by_slug_or_422(Region, data["region"], "region")


@bp.post("/")
@endpoint(
    LocationIn,
    LocationOut,
    status=201,
    access=Access.SUPER,
    scope=Scope.DIRECTORY_WRITE,
    conflicts=True,
)
def create_location(data):
    """Create a location."""
    resolve_region(data)
    return create_named(Location, data, reserved=RESERVED_SLUGS)


@bp.put("/slug/<slug:slug>")
@endpoint(
    LocationUpdate, LocationOut, access=Access.OWNER, scope=Scope.DIRECTORY_WRITE, conflicts=True
)
def update_location(data, location: Location):
    """Change a location: supers change everything, its owners only the descriptive fields."""
    if not current_user.is_super:
        reserved = sorted(FIELD_NAMES[name] for name in set(data) - OWNER_FIELDS)
        if reserved:
            abort(403, "Only a super may change " + ", ".join(reserved) + ".", fields=reserved)
    resolve_region(data)
    return update_named(location, data, reserved=RESERVED_SLUGS)


@bp.delete("/slug/<slug:slug>")
@endpoint(status=204, access=Access.SUPER, scope=Scope.DIRECTORY_WRITE, conflicts=True)
def delete_location(location: Location):
    """Delete a location that has no businesses, employers or votes left."""
    refuse_if_used(
        "location",
        {
            "businesses": select(Business.id).where(Business.location_id == location.id),
            "employers": select(Employer.id).where(Employer.location_id == location.id),
            "votes": select(Vote.id).where(Vote.location_id == location.id),
        },
    )
    forget_messages_about(location_mail(location))  # its business votes' mail, held ones too
    invited = db.session.scalars(
        select(User)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.location_id == location.id, User.status == UserStatus.INVITED)
    ).all()
    # Its roles end one by one, so that each removal is recorded (audit.py); the database
    # would also take them along (ON DELETE CASCADE), unseen.
    for membership in db.session.scalars(
        select(Membership).where(Membership.location_id == location.id)
    ):
        db.session.delete(membership)
    db.session.delete(location)
    db.session.flush()
    for user in invited:
        drop_invitation_if_roleless(user)
    db.session.commit()
