"""All models, importable from one place (Alembic's autogenerate sees them all here)."""

from ..types import utcnow
from .audit import AuditEntry
from .grant import GrantedRole, RoleGrant
from .idempotency import IdempotencyRecord
from .listing import Business, Employer, Listing, ListingCount, ListingSocial
from .location import Location, Membership, Role
from .outbox import OutboxMessage, OutboxStatus
from .reference import Category, Region, Social
from .token import Token, TokenPurpose
from .user import User, UserStatus
from .vote import Vote, VoteRevision, VoteType, turn_vote_revisions

__all__ = [
    "AuditEntry",
    "Business",
    "Category",
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
    "User",
    "UserStatus",
    "Vote",
    "VoteRevision",
    "VoteType",
    "turn_vote_revisions",
    "utcnow",
]
