"""/regions: a reference list; anyone reads, supers write."""

import uuid

from flask import Blueprint
from sqlalchemy import select

from ..endpoints import Access, endpoint
from ..models import Location, Region
from ..pagination import ListArgs, paginate, sort_fields
from ..schemas.regions import RegionIn, RegionOut, RegionUpdate
from .changes import create_named, delete_unused, update_named
from .lookups import get_or_404, named_by_path

bp = Blueprint("regions", __name__, url_prefix="/regions")
RegionArgs = ListArgs.sorted_by(sort_fields(Region), default="name")


@bp.get("/", endpoint="list")
@endpoint(response=RegionOut, query=RegionArgs, paged=True)
def list_regions(args):
    """List the regions (paged, sortable)."""
    return paginate(select(Region), args)


@bp.post("/")
@endpoint(RegionIn, RegionOut, status=201, access=Access.SUPER, conflicts=True)
def create_region(data):
    """Create a region (slug derived from the name when absent)."""
    return create_named(Region, data)


@bp.get("/slug/<slug:item_slug>", endpoint="get_by_slug")
@bp.get("/id/<uuid:item_id>", endpoint="get_by_id")
@endpoint(response=RegionOut)
def get_region(item_slug: str | None = None, item_id: uuid.UUID | None = None):
    """Get one region by slug or by id."""
    return get_or_404(Region, named_by_path(Region, item_slug, item_id), what="region")


@bp.put("/slug/<slug:item_slug>")
@endpoint(RegionUpdate, RegionOut, access=Access.SUPER, conflicts=True)
def update_region(data, item_slug: str):
    """Rename a region or change its slug."""
    return update_named(get_or_404(Region, Region.slug == item_slug, what="region"), data)


@bp.delete("/slug/<slug:item_slug>")
@endpoint(status=204, access=Access.SUPER, conflicts=True)
def delete_region(item_slug: str):
    """Delete a region no location uses."""
    region = get_or_404(Region, Region.slug == item_slug, what="region")
    uses = {"locations": select(Location.id).where(Location.region_id == region.id)}
    return delete_unused(region, "region", uses)
