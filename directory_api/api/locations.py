"""/locations: anyone reads; supers create, change and delete; owners change the basics."""

from typing import Any

from flask import Blueprint
from flask_login import current_user
from sqlalchemy import Select, select

from ..access import get_location_or_404, require_location_owner, require_super
from ..bodies import load_body
from ..credentials import drop_invitation_if_roleless
from ..errors import abort
from ..extensions import db
from ..models import Business, Employer, Location, Membership, Region, User, UserStatus, Vote
from ..openapi import spec
from ..schemas.locations import (
    OWNER_FIELDS,
    LocationIn,
    LocationListArgs,
    LocationOut,
    LocationUpdate,
)
from .common import by_slug_or_422, id_by_slug, no_content, refuse_if_used
from .resources import create_named, register_reads, update_named

bp = Blueprint("locations", __name__, url_prefix="/locations")
location_out = LocationOut()
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


register_reads(
    bp,
    Location,
    LocationOut,
    what="location",
    list_args=LocationListArgs,
    filters=filter_locations,
)


def resolve_region(data: dict[str, Any]) -> None:
    """Replace the region slug in `data` by the region (422 when there is no such region)."""
    if data.get("region") is not None:
        data["region"] = by_slug_or_422(Region, data["region"], "region")


@bp.post("/")
@require_super
@spec(body=LocationIn, response=LocationOut, status=201, conflicts=True)
def create_location():
    """Create a location."""
    data = load_body(LocationIn())
    resolve_region(data)
    return create_named(Location, location_out, data, reserved=RESERVED_SLUGS)


@bp.put("/slug/<slug:slug>")
@require_location_owner
@spec(body=LocationUpdate, response=LocationOut, conflicts=True)
def update_location(location: Location):
    """Change a location: supers change everything, its owners only the descriptive fields."""
    data = load_body(LocationUpdate())
    if not current_user.is_super:
        reserved = sorted(FIELD_NAMES[name] for name in set(data) - OWNER_FIELDS)
        if reserved:
            abort(403, "Only a super may change " + ", ".join(reserved) + ".", fields=reserved)
    resolve_region(data)
    return update_named(location, location_out, data, reserved=RESERVED_SLUGS)


@bp.delete("/slug/<slug:slug>")
@require_super
@spec(status=204, conflicts=True)
def delete_location(slug: str):
    """Delete a location that has no businesses, employers or votes left."""
    location = get_location_or_404(slug)
    refuse_if_used(
        "location",
        {
            "businesses": select(Business.id).where(Business.location_id == location.id),
            "employers": select(Employer.id).where(Employer.location_id == location.id),
            "votes": select(Vote.id).where(Vote.location_id == location.id),
        },
    )
    invited = db.session.scalars(
        select(User)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.location_id == location.id, User.status == UserStatus.INVITED)
    ).all()
    db.session.delete(location)  # its memberships go with it (ON DELETE CASCADE)
    db.session.flush()
    for user in invited:
        drop_invitation_if_roleless(user)
    db.session.commit()
    return no_content()
