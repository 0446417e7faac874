"""/socials: the social networks listings link to; anyone reads, supers write."""

from flask import Blueprint
from sqlalchemy import select

from ..access import require_super
from ..bodies import load_body
from ..models import Business, Employer, ListingSocial, Social
from ..openapi import spec
from ..schemas.base import TargetSchema
from ..schemas.socials import SocialIn, SocialOut, SocialUpdate
from .common import find_target
from .resources import create_named, delete_unused, register_reads, update_named

bp = Blueprint("socials", __name__, url_prefix="/socials")
register_reads(bp, Social, SocialOut, what="social")
social_out = SocialOut()


@bp.post("/")
@require_super
@spec(body=SocialIn, response=SocialOut, status=201, conflicts=True, not_found=True)
def create_social():
    """Create a social network."""
    return create_named(Social, social_out, load_body(SocialIn()))


@bp.put("/")
@require_super
@spec(body=SocialUpdate, response=SocialOut, conflicts=True, not_found=True)
def update_social():
    """Change the social network named in the body by `id` or current `slug`."""
    data = load_body(SocialUpdate())
    return update_named(find_target(Social, data, what="social"), social_out, data)


@bp.delete("/")
@require_super
@spec(body=TargetSchema, status=204, conflicts=True, not_found=True)
def delete_social():
    """Delete the social network named in the body, unless a listing links to it."""
    social = find_target(Social, load_body(TargetSchema()), what="social")
    links = select(ListingSocial.listing_id).where(ListingSocial.social_id == social.id)
    return delete_unused(
        social,
        "social",
        {
            "businesses": links.join(Business, Business.id == ListingSocial.listing_id),
            "employers": links.join(Employer, Employer.id == ListingSocial.listing_id),
        },
    )
