"""All models, importable from one place (Alembic's autogenerate sees them all here):
the directory's, and the platform's own tables (the outbox, idempotency records, marks of
things used once)."""

from ..platform.idempotency import IdempotencyRecord
from ..platform.outbox import OutboxMessage, OutboxStatus
from ..platform.single_use import UsedOnce
from ..platform.types import utcnow
from .api_token import ApiToken
from .audit import AuditCount, AuditEntry
from .grant import GrantedRole, RoleGrant
from .listing import Business, Employer, Listing, ListingCount, ListingSocial
from .location import Location, Membership, Role
from .reference import Category, Region, Social
from .token import Token, TokenPurpose
from .user import User, UserStatus
from .vote import Vote, VoteRevision, VoteType, turn_vote_revisions
from .webhook import DeliveryStatus, WebhookDelivery, WebhookSubscription

__all__ = [
    "ApiToken",
    "AuditCount",
    "AuditEntry",
    "Business",
    "Category",
    "DeliveryStatus",
    "Employer",
    "GrantedRole",
    "IdempotencyRecord",
    "Listing",
    "ListingCount",
    "ListingSocial",
    "Location",
    "Membership",
    "OutboxMessage",
    "OutboxStatus",
    "Region",
    "Role",
    "RoleGrant",
    "Social",
    "Token",
    "TokenPurpose",
    "UsedOnce",
    "User",
    "UserStatus",
    "Vote",
    "VoteRevision",
    "VoteType",
    "WebhookDelivery",
    "WebhookSubscription",
    "turn_vote_revisions",
    "utcnow",
]
