"""/socials: the social networks listings link to; anyone reads, supers write."""

from sqlalchemy import select

from ..endpoints import Access, endpoint
from ..models import Business, Employer, ListingSocial, Social
from ..models.api_token import Scope
from ..schemas.base import TargetSchema
from ..schemas.socials import SocialIn, SocialOut, SocialUpdate
from .changes import delete_unused, update_named
from .lookups import find_target
from .references import reference_blueprint

bp = reference_blueprint(Social, SocialIn, SocialOut, "socials", "social network")


@bp.put("/")
@endpoint(
    SocialUpdate,
    SocialOut,
    access=Access.SUPER,
    scope=Scope.DIRECTORY_WRITE,
    conflicts=True,
    not_found=True,
)
def update_social(data):
    """Change the social network named in the body by `id` or current `slug`."""
    return update_named(find_target(Social, data, what="social"), data)


@bp.delete("/")
@endpoint(
    TargetSchema,
    status=204,
    access=Access.SUPER,
    scope=Scope.DIRECTORY_WRITE,
    conflicts=True,
    not_found=True,
)
def delete_social(target):
    """Delete the social network named in the body, unless a listing links to it."""
    social = find_target(Social, target, what="social")
    links = select(ListingSocial.listing_id).where(ListingSocial.social_id == social.id)
    linked = {
        "businesses": links.join(Business, Business.id == ListingSocial.listing_id),
        "employers": links.join(Employer, Employer.id == ListingSocial.listing_id),
    }
    return delete_unused(social, "social", linked)
