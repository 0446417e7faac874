"""Personal API tokens (API.md 14): /me/tokens (a user's own, by session only), /tokens
(every user's, for supers) and /auth/tokens/revoke (anyone holding a leaked token)."""

import uuid
from typing import Any

from flask import Blueprint, url_for
from flask_login import current_user
from sqlalchemy import Select, or_, select

from ..access import TOKEN_PREFIX
from ..credentials import (
    create_api_token,
    live_api_tokens,
    revoke_api_tokens,
    verify_password,
    with_location_slugs,
)
from ..endpoints import Access, Answer, endpoint
from ..models import ApiToken, User, utcnow
from ..platform.bearer import token_hash, well_formed
from ..platform.errors import abort
from ..platform.extensions import db
from ..platform.limits import login_per_ip, token_endpoints
from ..platform.outbox import queue_mail
from ..platform.page_queries import paginate
from ..platform.pagination import Page, sort_fields
from ..schemas.tokens import (
    NewTokenOut,
    SuperTokenArgs,
    SuperTokenOut,
    TokenArgs,
    TokenIn,
    TokenOut,
    TokenRevokeIn,
)
from .lookups import get_or_404
from .me import signed_in_user

# No token reaches these, whatever its scopes (`tokens=False`): a stolen one can neither
# make more of itself nor hide from the supers who would revoke it.
bp = Blueprint("tokens", __name__)

SORTABLE = sort_fields(ApiToken)
OWN_ARGS = TokenArgs.sorted_by(SORTABLE, default="-createdAt")
EVERY_ARGS = SuperTokenArgs.sorted_by(SORTABLE, default="-createdAt")


def in_state(state: str | None) -> Any:
    if state == "active":
        return live_api_tokens()
    if state == "revoked":
        return ApiToken.revoked_at.is_not(None)
    if state == "expired":
        return ApiToken.revoked_at.is_(None) & (ApiToken.expires_at <= utcnow())
    return None


def token_page(stmt: Select, args: dict[str, Any]) -> Page:
    if (criterion := in_state(args.get("state"))) is not None:
        stmt = stmt.where(criterion)
    page = paginate(stmt, args)
    with_location_slugs(page.items)
    return page


def own_token(token_id: uuid.UUID) -> ApiToken:
    token = get_or_404(
        ApiToken, ApiToken.id == token_id, ApiToken.user_id == current_user.id, what="token"
    )
    return with_location_slugs([token])[0]


@bp.post("/me/tokens/")
@endpoint(
    TokenIn,
    NewTokenOut,
    status=201,
    conflicts=True,
    limits=(login_per_ip,),
    failures={403: "Wrong password."},
    access=Access.LOGIN,
    tokens=False,
)
def create_token(data):
    """Create a token for scripts: its secret is in this answer only, never again."""
    user = signed_in_user()
    if not verify_password(user.password_hash, data["password"]):
        abort(403, "Wrong password.")
    token = create_api_token(user, data, TOKEN_PREFIX)
    db.session.commit()
    location = url_for("tokens.get_token", token_id=token.id)
    return Answer(token, headers={"Location": location})


@bp.get("/me/tokens/")
@endpoint(response=TokenOut, query=OWN_ARGS, paged=True, access=Access.LOGIN, tokens=False)
def list_tokens(args):
    """Your tokens, without their secrets (`state`: active, expired or revoked)."""
    return token_page(select(ApiToken).where(ApiToken.user_id == current_user.id), args)


@bp.get("/me/tokens/id/<uuid:token_id>")
@endpoint(response=TokenOut, access=Access.LOGIN, tokens=False)
def get_token(token_id: uuid.UUID):
    """One of your tokens."""
    return own_token(token_id)


@bp.delete("/me/tokens/id/<uuid:token_id>")
@endpoint(status=204, access=Access.LOGIN, tokens=False)
def revoke_token(token_id: uuid.UUID):
    """Revoke one of your tokens (a revoked or expired one stays so)."""
    revoke_api_tokens(ApiToken.id == own_token(token_id).id)
    db.session.commit()


@bp.delete("/me/tokens/")
@endpoint(status=204, access=Access.LOGIN, tokens=False)
def revoke_every_token():
    """Revoke every token of yours."""
    revoke_api_tokens(ApiToken.user_id == current_user.id)
    db.session.commit()


@bp.get("/tokens/")
@endpoint(response=SuperTokenOut, query=EVERY_ARGS, paged=True, access=Access.SUPER, tokens=False)
def list_every_token(args):
    """Every user's tokens (`user`, `state`, `lastUsedBefore`: not used since)."""
    stmt = select(ApiToken)
    if "user" in args:
        stmt = stmt.where(ApiToken.user_id == args["user"])
    if "last_used_before" in args:
        before = args["last_used_before"]
        stmt = stmt.where(or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < before))
    return token_page(stmt, args)


@bp.delete("/tokens/id/<uuid:token_id>")
@endpoint(status=204, access=Access.SUPER, tokens=False)
def revoke_any_token(token_id: uuid.UUID):
    """Revoke any user's token."""
    token = get_or_404(ApiToken, ApiToken.id == token_id, what="token")
    revoke_api_tokens(ApiToken.id == token.id)
    db.session.commit()


@bp.post("/auth/tokens/revoke")
@endpoint(TokenRevokeIn, status=204, limits=(token_endpoints,))
def revoke_leaked_token(data):
    """Revoke a token found where it should not be (no sign-in needed): 204 whether or not
    it matched, and its user is mailed when it did."""
    text = data["token"].strip()
    if not well_formed(text, TOKEN_PREFIX):
        return None
    for token in revoke_api_tokens(ApiToken.token_hash == token_hash(text)):
        user = db.session.get(User, token.user_id)
        queue_mail(user.email, "token_leaked", user=user, token=token)
    db.session.commit()
    return None
