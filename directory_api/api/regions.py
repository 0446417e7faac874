"""/regions: a reference list; anyone reads, supers write."""

from sqlalchemy import select

from ..endpoints import Access, endpoint
from ..models import Location, Region
from ..models.api_token import Scope
from ..schemas.regions import RegionIn, RegionOut, RegionUpdate
from .changes import delete_unused, update_named
from .lookups import get_or_404
from .references import reference_blueprint

bp = reference_blueprint(Region, RegionIn, RegionOut, "regions", "region")


@bp.put("/slug/<slug:item_slug>")
@endpoint(RegionUpdate, RegionOut, access=Access.SUPER, scope=Scope.DIRECTORY_WRITE, conflicts=True)
def update_region(data, item_slug: str):
    """Rename a region or change its slug."""
    return update_named(get_or_404(Region, Region.slug == item_slug, what="region"), data)


@bp.delete("/slug/<slug:item_slug>")
@endpoint(status=204, access=Access.SUPER, scope=Scope.DIRECTORY_WRITE, conflicts=True)
def delete_region(item_slug: str):
    """Delete a region no location uses."""
    region = get_or_404(Region, Region.slug == item_slug, what="region")
    uses = {"locations": select(Location.id).where(Location.region_id == region.id)}
    return delete_unused(region, "region", uses)
