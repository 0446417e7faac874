"""/regions: a reference list; anyone reads, supers write."""

from flask import Blueprint
from sqlalchemy import select

from ..access import require_super
from ..bodies import load_body
from ..models import Location, Region
from ..openapi import spec
from ..schemas.regions import RegionIn, RegionOut, RegionUpdate
from .common import get_or_404
from .resources import create_named, delete_unused, register_reads, update_named

bp = Blueprint("regions", __name__, url_prefix="/regions")
register_reads(bp, Region, RegionOut, what="region")
region_out = RegionOut()


@bp.post("/")
@require_super
@spec(body=RegionIn, response=RegionOut, status=201, conflicts=True)
def create_region():
    """Create a region (slug derived from the name when absent)."""
    return create_named(Region, region_out, load_body(RegionIn()))


# <item_slug>, as the reads name it: one path in the OpenAPI document.
@bp.put("/slug/<slug:item_slug>")
@require_super
@spec(body=RegionUpdate, response=RegionOut, conflicts=True)
def update_region(item_slug: str):
    """Rename a region or change its slug."""
    region = get_or_404(Region, Region.slug == item_slug, what="region")
    return update_named(region, region_out, load_body(RegionUpdate()))


@bp.delete("/slug/<slug:item_slug>")
@require_super
@spec(status=204, conflicts=True)
def delete_region(item_slug: str):
    """Delete a region no location uses."""
    region = get_or_404(Region, Region.slug == item_slug, what="region")
    return delete_unused(
        region, "region", {"locations": select(Location.id).where(Location.region_id == region.id)}
    )
