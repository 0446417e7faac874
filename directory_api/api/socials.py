"""/socials: the social networks listings link to; anyone reads, supers write."""

import uuid

from flask import Blueprint
from sqlalchemy import select

from ..endpoints import Access, endpoint
from ..models import Business, Employer, ListingSocial, Social
from ..pagination import ListArgs, paginate, sort_fields
from ..schemas.base import TargetSchema
from ..schemas.socials import SocialIn, SocialOut, SocialUpdate
from .changes import create_named, delete_unused, update_named
from .lookups import find_target, get_or_404, named_by_path

bp = Blueprint("socials", __name__, url_prefix="/socials")
SocialArgs = ListArgs.sorted_by(sort_fields(Social), default="name")


@bp.get("/", endpoint="list")
@endpoint(response=SocialOut, query=SocialArgs, paged=True)
def list_socials(args):
    """List the social networks (paged, sortable)."""
    return paginate(select(Social), args)


@bp.get("/slug/<slug:item_slug>", endpoint="get_by_slug")
@bp.get("/id/<uuid:item_id>", endpoint="get_by_id")
@endpoint(response=SocialOut)
def get_social(item_slug: str | None = None, item_id: uuid.UUID | None = None):
    """Get one social network by slug or by id."""
    return get_or_404(Social, named_by_path(Social, item_slug, item_id), what="social")


@bp.post("/")
@endpoint(SocialIn, SocialOut, status=201, access=Access.SUPER, conflicts=True)
def create_social(data):
    """Create a social network."""
    return create_named(Social, data)


@bp.put("/")
@endpoint(SocialUpdate, SocialOut, access=Access.SUPER, conflicts=True, not_found=True)
def update_social(data):
    """Change the social network named in the body by `id` or current `slug`."""
    return update_named(find_target(Social, data, what="social"), data)


@bp.delete("/")
@endpoint(TargetSchema, status=204, access=Access.SUPER, conflicts=True, not_found=True)
def delete_social(target):
    """Delete the social network named in the body, unless a listing links to it."""
    social = find_target(Social, target, what="social")
    links = select(ListingSocial.listing_id).where(ListingSocial.social_id == social.id)
    linked = {
        "businesses": links.join(Business, Business.id == ListingSocial.listing_id),
        "employers": links.join(Employer, Employer.id == ListingSocial.listing_id),
    }
    return delete_unused(social, "social", linked)
