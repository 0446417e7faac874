"""One-time tokens: 256 random bits, stored only as a SHA-256 hash, single-use, expiring."""

import hmac
from datetime import timedelta

from sqlalchemy import delete, select

from .extensions import db
from .models import Token, TokenPurpose, User, utcnow
from .security import hash_token, new_token

LIFETIMES = {
    TokenPurpose.INVITATION: timedelta(days=7),
    TokenPurpose.PASSWORD_RESET: timedelta(hours=1),
    TokenPurpose.EMAIL_UPDATE: timedelta(hours=24),
}


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
    token, token_hash = new_token()
    db.session.add(
        Token(
            user_id=user.id,
            purpose=purpose,
            token_hash=token_hash,
            email=email,
            expires_at=utcnow() + LIFETIMES[purpose],
        )
    )
    return token


def redeem_token(token: str, purpose: TokenPurpose) -> Token | None:
    """The live token matching `token`, marked used; None for unknown, used or expired ones."""
    if not token or len(token) > 200:
        return None
    token_hash = hash_token(token)
    found = db.session.scalar(
        select(Token)
        .where(
            Token.token_hash == token_hash,
            Token.purpose == purpose,
            Token.used_at.is_(None),
            Token.expires_at > utcnow(),
        )
        .with_for_update()
    )
    if found is None or not hmac.compare_digest(found.token_hash, token_hash):
        return None
    found.used_at = utcnow()
    return found
