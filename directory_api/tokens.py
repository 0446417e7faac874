"""One-time tokens: 256 random bits, stored only as a SHA-256 hash, single-use, expiring.

The same holds for the tokens of pending role grants, which live in their own table.
"""

import hmac
import uuid
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, select

from .extensions import db
from .models import GrantedRole, RoleGrant, Token, TokenPurpose, User, utcnow
from .security import hash_token, new_token

LIFETIMES = {
    TokenPurpose.INVITATION: timedelta(days=7),
    TokenPurpose.PASSWORD_RESET: timedelta(hours=1),
    TokenPurpose.EMAIL_UPDATE: timedelta(hours=24),
}
# A role offered to an existing account waits as long as an invitation does.
GRANT_LIFETIME = timedelta(days=7)

Redeemable = TypeVar("Redeemable", Token, RoleGrant)


def void_tokens(user: User, purpose: TokenPurpose) -> None:
    """Unused tokens of this purpose stop working (a newer one was issued, or they are moot)."""
    db.session.execute(
        delete(Token).where(
            Token.user_id == user.id, Token.purpose == purpose, Token.used_at.is_(None)
        )
    )


def issue_token(user: User, purpose: TokenPurpose, email: str | None = None) -> str:
    """A new token for `user`, voiding older unused ones; returns the only copy of it."""
    void_tokens(user, purpose)
    return _add_with_token(
        Token(
            user_id=user.id, purpose=purpose, email=email, expires_at=utcnow() + LIFETIMES[purpose]
        )
    )


def _add_with_token(row: Redeemable) -> str:
    """Give `row` a new token's hash and add it; returns the only copy of the token."""
    token, row.token_hash = new_token()
    db.session.add(row)
    return token


def _redeem(model: type[Redeemable], token: str, *criteria: Any) -> Redeemable | None:
    """The live row of `model` matching `token` and `criteria`, marked used; else None."""
    if not token or len(token) > 200:
        return None
    token_hash = hash_token(token)
    found = db.session.scalar(
        select(model)
        .where(
            model.token_hash == token_hash,
            model.used_at.is_(None),
            model.expires_at > utcnow(),
            *criteria,
        )
        .with_for_update()
    )
    if found is None or not hmac.compare_digest(found.token_hash, token_hash):
        return None
    found.used_at = utcnow()
    return found


def redeem_token(token: str, purpose: TokenPurpose) -> Token | None:
    """The live token matching `token`, marked used; None for unknown, used or expired ones."""
    return _redeem(Token, token, Token.purpose == purpose)


def issue_grant(user: User, role: GrantedRole, location_id: uuid.UUID | None) -> str:
    """A pending grant of `role` (at a location; none for a super) for `user`, replacing an
    unused one for the same role and place; returns the only copy of its token."""
    db.session.execute(
        delete(RoleGrant).where(
            RoleGrant.user_id == user.id,
            RoleGrant.role == role,
            RoleGrant.location_id == location_id,  # IS NULL for a super grant
            RoleGrant.used_at.is_(None),
        )
    )
    return _add_with_token(
        RoleGrant(
            user_id=user.id,
            location_id=location_id,
            role=role,
            expires_at=utcnow() + GRANT_LIFETIME,
        )
    )


def redeem_grant(token: str, user: User) -> RoleGrant | None:
    """The live grant for `user` matching `token`, marked used. Another user's token is
    None and stays usable by its own user."""
    return _redeem(RoleGrant, token, RoleGrant.user_id == user.id)
