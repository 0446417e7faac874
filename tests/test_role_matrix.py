"""Every route × seven identities: who gets in, who is refused, as API.md promises.

One table row per (rule, method) of the URL map. Each case starts from the shared world —
the locations harbour and hill, one user per identity — adds whatever the request targets, and
sends a request that is valid, so the allowed identities get the real success status and
the others are refused for who they are, not for what they sent. A refused request changes
no row (the outbox included): this table is where every 401 and 403 is tested.

Reading API.md (section 2 "Roles", then each endpoint's section), where it needed reading:
- POST /auth/logout: the interface description marks it [S] [O] [A], but API.md says only
  "401 when not signed in", and API.md stands; so any signed-in user, role or not, gets 204.
- /locations/:slug/owners/ are the supers' ([S]); …/admins/ the location's owners' ([O],
  so supers too); admins manage neither.
- POST …/votes/ is "access to the location" (super, owner, admin) although the interface
  description lists no role letter: the service "must confirm that the user has access".
- GET …/votes/id/:id names an inactive vote: it exists only for those with access (200),
  everyone else gets 404 (API.md 1, "Errors": "a hidden (inactive) vote seen by someone
  who may not see it").
- PUT /me/id/:id names a third user, so only a super may (a user's own id is test_me's).
- The token endpoints (register, reset completion, e-mail confirmation) are public: the
  token is the credential. Each case gets a real token the way a user does, from the mail
  queued by the invitation / reset / e-mail change, so every identity gets the success.
- GET /health/ready is not in API.md; it is public, like /health.
- GET /locations/:slug/audit/ is "an owner of that location, or a super" (API.md 10):
  admins are refused.
- POST /me/roles/accept/:token (API.md 9) needs a sign-in, and the token is the offer to
  one user: "plain" (an active account with no role) is offered harbour's admin role by a
  super and accepts it (200); every other signed-in user, a super included, gets 404.
- Pending offers (API.md 18) are listed and withdrawn by whoever may make them, as the
  POST that makes them: supers for /supers/pending/ and …/owners/pending/, harbour's
  owners (and supers) for …/admins/pending/. A super's offer to "plain" is withdrawn.
- API tokens (API.md 14): /me/tokens* are each user's own, by session; GET/DELETE
  /tokens/ are the supers'; POST /auth/tokens/revoke is public (204 whatever it names).
  Every route is also called through tokens of several kinds (every scope, read scopes,
  limited to a place, expired, revoked): none ever gets more than its user's session.
"""

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask

from directory_api.access import granted
from directory_api.endpoints import declaration_of
from directory_api.models import Location, Role, utcnow
from directory_api.models.api_token import Scope
from directory_api.platform.extensions import db

from .conftest import PROBLEM, database_rows, link_in, queued_mail, signed_in
from .factories import (
    PASSWORD,
    grant,
    make_category,
    make_listing,
    make_region,
    make_social,
    make_user,
    make_vote,
)

# As conftest's `world` names them; other_admin and other_owner hold their roles at hill.
IDENTITIES = ("anonymous", "plain", "other_admin", "other_owner", "admin", "owner", "super")
MEMBER = "member@example.com"  # a user with no role, whom some requests are about
NEW_PASSWORD = "a brand new passphrase"
SKIPPED_BLUEPRINTS = {"static"}

DOCS_ASSET_RULE = (
    "/docs/<any('favicon-32x32.png', 'init.js', 'swagger-ui-bundle.js', 'swagger-ui.css'):name>"
)
SUPER = ("super",)
OWNER = ("owner", "super")
ACCESS = ("admin", "owner", "super")


def everyone(status: int) -> dict[str, int]:
    """A public endpoint: the same answer for every identity."""
    return dict.fromkeys(IDENTITIES, status)


def signed_in_users(status: int) -> dict[str, int]:
    """Needs a signed-in user, any role or none."""
    return {**everyone(status), "anonymous": 401}


def only(status: int, allowed: tuple[str, ...]) -> dict[str, int]:
    """Needs one of the `allowed` identities: 401 anonymous, 403 for the other signed-in."""
    return {
        identity: status if identity in allowed else 401 if identity == "anonymous" else 403
        for identity in IDENTITIES
    }


def owned_by(status: int, owner: str) -> dict[str, int]:
    """A signed-in user's own resource: 404 for every other signed-in user."""
    return {**signed_in_users(404), owner: status}


def visible_to(status: int, allowed: tuple[str, ...]) -> dict[str, int]:
    """Public, but the target exists only for the `allowed` identities (404 for the rest)."""
    return {identity: status if identity in allowed else 404 for identity in IDENTITIES}


@dataclass(frozen=True)
class Case:
    """A request (its path and body formatted with the world's ids and tokens), what the
    world must hold for it, and the status each identity gets."""

    path: str
    outcomes: dict[str, int]
    body: Any = None  # JSON, or a str: a CSV body
    needs: tuple[str, ...] = ()


Rows = dict[tuple[str, str], Case]  # (rule, method) → Case

SUBMISSION = {
    "yourName": "Ann Voter",
    "yourEmail": "ann.voter@example.org",
    "yourPhone": "+44 100 000 000",
    "businessName": "Harbour Works",
    "businessBranch": "Quay",
    "voteBody": "A fine place to work.",
}


def listing_rows(plural: str) -> Rows:
    """Businesses or employers of harbour; "target" is one of them."""
    base = f"/locations/<slug:slug>/{plural}"
    here = f"/locations/harbour/{plural}"
    needs = (plural,)
    return {
        (f"{base}/", "GET"): Case(f"{here}/", everyone(200), needs=needs),
        (f"{base}/id/<uuid:item_id>", "GET"): Case(
            f"{here}/id/{{{plural}}}", everyone(200), needs=needs
        ),
        (f"{base}/slug/<slug:item_slug>", "GET"): Case(
            f"{here}/slug/target", everyone(200), needs=needs
        ),
        (f"{base}/search/<term>", "GET"): Case(f"{here}/search/works", everyone(200), needs=needs),
        (f"{base}/export.csv", "GET"): Case(f"{here}/export.csv", everyone(200), needs=needs),
        (f"{base}/import", "POST"): Case(
            f"{here}/import", only(200, ACCESS), "slug,name\ntarget,Renamed Works\n", needs
        ),
        (f"{base}/", "POST"): Case(
            f"{here}/",
            only(201, ACCESS),
            {
                "name": "New Place",
                "subcategory": "cafes",
                "socials": [{"social": "instagram", "url": "https://instagram.com/new"}],
            },
            ("categories", "socials"),
        ),
        (f"{base}/", "PUT"): Case(
            f"{here}/", only(200, ACCESS), {"slug": "target", "name": "Renamed Works"}, needs
        ),
        (f"{base}/", "DELETE"): Case(f"{here}/", only(204, ACCESS), {"slug": "target"}, needs),
    }


def reference_rows(plural: str, target: str, create: dict[str, str]) -> Rows:
    """Regions, categories and socials: anyone reads, supers write."""
    reads = {
        (f"/{plural}/", "GET"): f"/{plural}/",
        (f"/{plural}/id/<uuid:item_id>", "GET"): f"/{plural}/id/{{{plural}}}",
        (f"/{plural}/slug/<slug:item_slug>", "GET"): f"/{plural}/slug/{target}",
    }
    rows = {key: Case(path, everyone(200), needs=(plural,)) for key, path in reads.items()}
    rows[(f"/{plural}/", "POST")] = Case(f"/{plural}/", only(201, SUPER), create, (plural,))
    return rows


def offer_rows(base: str, here: str, plural: str, makers: tuple[str, ...]) -> Rows:
    """The pending offers of supers, or of harbour's owners or admins; `{offered}` is the
    user a super offered that role to."""
    needs = (f"{plural}_offer",)
    return {
        (f"{base}/pending/", "GET"): Case(f"{here}/pending/", only(200, makers), needs=needs),
        (f"{base}/pending/id/<uuid:user_id>", "DELETE"): Case(
            f"{here}/pending/id/{{offered}}", only(204, makers), needs=needs
        ),
    }


def member_rows(plural: str, managers: tuple[str, ...]) -> Rows:
    """Owners and admins of harbour; `{target}` holds that role there."""
    base = f"/locations/<slug:slug>/{plural}"
    here = f"/locations/harbour/{plural}"
    needs = (f"target_{plural}",)
    return {
        **offer_rows(base, here, plural, managers),
        (f"{base}/", "GET"): Case(f"{here}/", only(200, managers), needs=needs),
        (f"{base}/", "POST"): Case(
            f"{here}/", only(201, managers), body={"email": "new@example.com", "name": "New"}
        ),
        (f"{base}/id/<uuid:user_id>", "GET"): Case(
            f"{here}/id/{{target}}", only(200, managers), needs=needs
        ),
        (f"{base}/id/<uuid:user_id>", "PUT"): Case(
            f"{here}/id/{{target}}", only(200, managers), body={"name": "Renamed"}, needs=needs
        ),
        (f"{base}/id/<uuid:user_id>", "DELETE"): Case(
            f"{here}/id/{{target}}", only(204, managers), needs=needs
        ),
    }


def submission(kind: str, status: int, **extra: str) -> Case:
    path = f"/locations/harbour/votes/submit/{kind}"
    return Case(path, everyone(status), {**SUBMISSION, **extra})


def webhook_rows(rule: str, here: str, who: tuple[str, ...]) -> Rows:
    """A location's webhook subscriptions (its owners) or the global ones (supers)."""
    one = f"{here}/id/{{webhook}}"
    needs = ("webhook",) if who == OWNER else ("global_webhook",)
    body = {"url": "https://93.184.216.34/hook", "events": ["vote.submitted"]}
    return {
        (f"{rule}/", "POST"): Case(f"{here}/", only(201, who), body),
        (f"{rule}/", "GET"): Case(f"{here}/", only(200, who)),
        (f"{rule}/id/<uuid:webhook_id>", "GET"): Case(one, only(200, who), needs=needs),
        (f"{rule}/id/<uuid:webhook_id>", "PUT"): Case(
            one, only(200, who), {"description": "CRM"}, needs
        ),
        (f"{rule}/id/<uuid:webhook_id>", "DELETE"): Case(one, only(204, who), needs=needs),
        (f"{rule}/id/<uuid:webhook_id>/rotate-secret", "POST"): Case(
            f"{one}/rotate-secret", only(200, who), needs=needs
        ),
        (f"{rule}/id/<uuid:webhook_id>/deliveries/", "GET"): Case(
            f"{one}/deliveries/", only(200, who), needs=needs
        ),
        (
            f"{rule}/id/<uuid:webhook_id>/deliveries/id/<uuid:delivery_id>/redeliver",
            "POST",
        ): Case(f"{one}/deliveries/id/{{delivery}}/redeliver", only(202, who), needs=needs),
        (f"{rule}/id/<uuid:webhook_id>/test", "POST"): Case(
            f"{one}/test", only(202, who), needs=needs
        ),
    }


TABLE: Rows = {
    # Operations and documents
    ("/health", "GET"): Case("/health", everyone(200)),
    ("/health/ready", "GET"): Case("/health/ready", everyone(200)),
    # By address (the matrix asks from loopback, which METRICS_ALLOW lists), not by role:
    # who else may read it is tests/test_metrics.py's.
    ("/metrics", "GET"): Case("/metrics", everyone(200)),
    ("/openapi.json", "GET"): Case("/openapi.json", everyone(200)),
    ("/", "GET"): Case("/", everyone(200)),
    ("/docs", "GET"): Case("/docs", everyone(200)),
    (DOCS_ASSET_RULE, "GET"): Case("/docs/init.js", everyone(200)),
    ("/docs/altcha.min.js", "GET"): Case("/docs/altcha.min.js", everyone(200)),
    # Sessions
    ("/auth/login", "POST"): Case(
        "/auth/login", everyone(200), {"email": MEMBER, "password": PASSWORD}, ("member",)
    ),
    ("/auth/logout", "POST"): Case("/auth/logout", signed_in_users(204)),
    # Accounts
    ("/me/", "GET"): Case("/me/", signed_in_users(200)),
    ("/me/id/<uuid:user_id>", "PUT"): Case(
        "/me/id/{member}", only(200, SUPER), {"name": "Mem Ber", "phone": "+44 1"}, ("member",)
    ),
    ("/me/register/<uuid:user_id>", "POST"): Case(
        "/me/register/{invitee}",
        everyone(200),
        {"token": "{invitation_token}", "password": NEW_PASSWORD, "name": "Invitee"},
        ("invitation",),
    ),
    ("/me/password-reset", "POST"): Case(
        "/me/password-reset", everyone(202), {"email": MEMBER}, ("member",)
    ),
    ("/me/password-reset/<token>", "POST"): Case(
        "/me/password-reset/{reset_token}", everyone(204), {"password": NEW_PASSWORD}, ("reset",)
    ),
    ("/me/password-update", "POST"): Case(
        "/me/password-update",
        signed_in_users(204),
        {"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD},
    ),
    ("/me/email-update", "POST"): Case(
        "/me/email-update",
        signed_in_users(202),
        {"email": "fresh@example.net", "password": PASSWORD},
    ),
    ("/me/email-update/<token>", "POST"): Case(
        "/me/email-update/{email_token}", everyone(200), needs=("email_change",)
    ),
    ("/me/roles/accept/<token>", "POST"): Case(
        "/me/roles/accept/{offer_token}",
        {**visible_to(200, ("plain",)), "anonymous": 401},
        needs=("offer",),
    ),
    # Reference lists
    **reference_rows("regions", "north", {"name": "South"}),
    ("/regions/slug/<slug:item_slug>", "PUT"): Case(
        "/regions/slug/north", only(200, SUPER), {"name": "Far North"}, ("regions",)
    ),
    ("/regions/slug/<slug:item_slug>", "DELETE"): Case(
        "/regions/slug/north", only(204, SUPER), needs=("regions",)
    ),
    **reference_rows("categories", "cafes", {"name": "Bakeries", "parent": "food"}),
    ("/categories/", "PUT"): Case(
        "/categories/", only(200, SUPER), {"slug": "cafes", "name": "Coffee"}, ("categories",)
    ),
    ("/categories/", "DELETE"): Case(  # cafes: a subcategory no listing uses
        "/categories/", only(204, SUPER), {"slug": "cafes"}, ("categories",)
    ),
    **reference_rows(
        "socials", "instagram", {"name": "Mastodon", "url": "https://joinmastodon.org"}
    ),
    ("/socials/", "PUT"): Case(
        "/socials/", only(200, SUPER), {"slug": "instagram", "name": "Insta"}, ("socials",)
    ),
    ("/socials/", "DELETE"): Case(
        "/socials/", only(204, SUPER), {"slug": "instagram"}, ("socials",)
    ),
    # Supers; {target} is a second super, so the last one never goes
    ("/supers/", "GET"): Case("/supers/", only(200, SUPER), needs=("target_super",)),
    ("/supers/", "POST"): Case("/supers/", only(201, SUPER), {"email": "new@example.com"}),
    ("/supers/id/<uuid:user_id>", "GET"): Case(
        "/supers/id/{target}", only(200, SUPER), needs=("target_super",)
    ),
    ("/supers/id/<uuid:user_id>", "PUT"): Case(
        "/supers/id/{target}", only(200, SUPER), {"name": "Renamed"}, ("target_super",)
    ),
    ("/supers/id/<uuid:user_id>", "DELETE"): Case(
        "/supers/id/{target}", only(204, SUPER), needs=("target_super",)
    ),
    **offer_rows("/supers", "/supers", "supers", SUPER),
    # Locations; harbour holds no listings or votes here, so a super may delete it
    ("/locations/", "GET"): Case("/locations/", everyone(200)),
    ("/locations/", "POST"): Case(
        "/locations/", only(201, SUPER), {"name": "Bay", "region": "north"}, ("regions",)
    ),
    ("/locations/id/<uuid:item_id>", "GET"): Case("/locations/id/{harbour}", everyone(200)),
    ("/locations/slug/<slug:item_slug>", "GET"): Case("/locations/slug/harbour", everyone(200)),
    ("/locations/slug/<slug:slug>", "PUT"): Case(  # only fields an owner may change
        "/locations/slug/harbour",
        only(200, OWNER),
        {"name": "Harbour Town", "description": "By the sea.", "email": "desk@harbour.example"},
    ),
    ("/locations/slug/<slug:slug>", "DELETE"): Case("/locations/slug/harbour", only(204, SUPER)),
    # Owners (supers manage them) and admins (owners and supers manage them)
    **member_rows("owners", SUPER),
    **member_rows("admins", OWNER),
    # Businesses and employers
    **listing_rows("businesses"),
    **listing_rows("employers"),
    # Votes; {hidden} is an inactive vote, {shown} an active one
    ("/locations/<slug:slug>/votes/", "GET"): Case(
        "/locations/harbour/votes/", everyone(200), needs=("votes",)
    ),
    ("/locations/<slug:slug>/votes/id/<uuid:vote_id>", "GET"): Case(
        "/locations/harbour/votes/id/{hidden}", visible_to(200, ACCESS), needs=("votes",)
    ),
    ("/locations/<slug:slug>/votes/", "POST"): Case(
        "/locations/harbour/votes/",
        only(201, ACCESS),
        {**SUBMISSION, "yourPosition": "Clerk", "active": True, "employer": "target"},
        ("employers",),
    ),
    ("/locations/<slug:slug>/votes/", "PUT"): Case(
        "/locations/harbour/votes/",
        only(200, ACCESS),
        {"id": "{hidden}", "active": True, "employer": "target"},
        ("votes", "employers"),
    ),
    ("/locations/<slug:slug>/votes/", "DELETE"): Case(
        "/locations/harbour/votes/", only(204, ACCESS), {"id": "{hidden}"}, ("votes",)
    ),
    **webhook_rows("/locations/<slug:slug>/webhooks", "/locations/harbour/webhooks", OWNER),
    **webhook_rows("/webhooks", "/webhooks", SUPER),
    ("/locations/<slug:slug>/votes/challenge", "GET"): Case(
        "/locations/harbour/votes/challenge", everyone(200)
    ),
    ("/locations/<slug:slug>/votes/held/", "GET"): Case(
        "/locations/harbour/votes/held/", only(200, ACCESS), needs=("held",)
    ),
    ("/locations/<slug:slug>/votes/held/id/<uuid:message_id>/release", "POST"): Case(
        "/locations/harbour/votes/held/id/{held}/release", only(204, ACCESS), needs=("held",)
    ),
    ("/locations/<slug:slug>/votes/held/id/<uuid:message_id>/discard", "POST"): Case(
        "/locations/harbour/votes/held/id/{held}/discard", only(204, ACCESS), needs=("held",)
    ),
    ("/locations/<slug:slug>/votes/bulk", "POST"): Case(
        "/locations/harbour/votes/bulk",
        only(200, ACCESS),
        {"ids": ["{hidden}"], "action": "activate"},
        ("votes",),
    ),
    ("/locations/<slug:slug>/votes/id/<uuid:vote_id>/reply", "PUT"): Case(
        "/locations/harbour/votes/id/{hidden}/reply",
        only(201, ACCESS),
        {"body": "Thank you for your kind words."},
        ("votes",),
    ),
    ("/locations/<slug:slug>/votes/id/<uuid:vote_id>/reply", "DELETE"): Case(
        "/locations/harbour/votes/id/{shown}/reply", only(204, ACCESS), needs=("votes", "reply")
    ),
    ("/locations/<slug:slug>/votes/submit/btob", "POST"): submission(
        "btob", 202, yourBusiness="Ann's Bakery"
    ),
    ("/locations/<slug:slug>/votes/submit/btoc", "POST"): submission("btoc", 202),
    ("/locations/<slug:slug>/votes/submit/employer", "POST"): submission(
        "employer", 201, yourPosition="Clerk"
    ),
    ("/locations/<slug:slug>/votes/export.csv", "GET"): Case(
        "/locations/harbour/votes/export.csv", only(200, ACCESS), needs=("votes",)
    ),
    ("/locations/<slug:slug>/votes/summary", "GET"): Case(
        "/locations/harbour/votes/summary", only(200, ACCESS), needs=("votes",)
    ),
    ("/locations/<slug:slug>/votes/results", "GET"): Case(
        "/locations/harbour/votes/results", everyone(200), needs=("votes",)
    ),
    # The audit log (API.md 10): supers read it all, owners their location's.
    ("/audit/", "GET"): Case("/audit/", only(200, SUPER)),
    ("/locations/<slug:slug>/audit/", "GET"): Case("/locations/harbour/audit/", only(200, OWNER)),
    # Personal API tokens (API.md 14): by session, each user their own; supers every one.
    ("/me/tokens/", "POST"): Case(
        "/me/tokens/",
        signed_in_users(201),
        {"name": "cron", "password": PASSWORD, "scopes": ["directory:read"]},
    ),
    ("/me/tokens/", "GET"): Case("/me/tokens/", signed_in_users(200), needs=("api_token",)),
    ("/me/tokens/", "DELETE"): Case("/me/tokens/", signed_in_users(204), needs=("api_token",)),
    ("/me/tokens/id/<uuid:token_id>", "GET"): Case(
        "/me/tokens/id/{api_token}", owned_by(200, "owner"), needs=("api_token",)
    ),
    ("/me/tokens/id/<uuid:token_id>", "DELETE"): Case(
        "/me/tokens/id/{api_token}", owned_by(204, "owner"), needs=("api_token",)
    ),
    ("/tokens/", "GET"): Case("/tokens/", only(200, SUPER), needs=("api_token",)),
    ("/tokens/id/<uuid:token_id>", "DELETE"): Case(
        "/tokens/id/{api_token}", only(204, SUPER), needs=("api_token",)
    ),
    ("/auth/tokens/revoke", "POST"): Case(
        "/auth/tokens/revoke", everyone(204), {"token": "{api_token_secret}"}, ("api_token",)
    ),
    # Vote receipts (API.md 8): the token from the receipt mail is the credential.
    ("/votes/confirm/<token>", "POST"): Case(
        "/votes/confirm/{receipt_token}", everyone(200), needs=("receipt",)
    ),
    ("/votes/withdraw/<token>", "POST"): Case(
        "/votes/withdraw/{receipt_token}", everyone(204), needs=("receipt",)
    ),
}

# (rule, method, identity) → what is wrong, for cases where the service breaks API.md.
DEFECTS: dict[tuple[str, str, str], str] = {}


def url_map_routes(app: Flask) -> set[tuple[str, str]]:
    return {
        (rule.rule, method)
        for rule in app.url_map.iter_rules()
        if rule.endpoint.split(".")[0] not in SKIPPED_BLUEPRINTS
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }


def test_the_table_has_exactly_the_routes_of_the_url_map(app):
    routes = url_map_routes(app)
    without_a_row, stale_rows = sorted(routes - TABLE.keys()), sorted(TABLE.keys() - routes)
    assert (without_a_row, stale_rows) == ([], [])


def test_every_row_names_every_identity():
    for key, case in TABLE.items():
        assert tuple(case.outcomes) == IDENTITIES, key


# --- the world of one case -------------------------------------------------------------------


def add_vote(location: Location, *, active: bool, **fields: Any) -> str:
    vote = make_vote(
        location,
        active=active,
        **fields,
        your_name="Val Voter",
        your_email="val@example.org",
        your_phone="+44 100 000 001",
        business_name="Harbour Works",
        business_branch="Quay",
        vote_body="Kind managers.",
        your_position="Clerk",
    )
    return str(vote.id)


def invitation(app: Flask) -> dict[str, str]:
    """An invitation to hill's admins, sent by a super; its link carries the id and token."""
    response = signed_in(app, "super@example.com").post(
        "/locations/hill/admins/", json={"email": "invitee@example.com"}
    )
    assert response.status_code == 201, response.get_json()
    [mail] = queued_mail("invitee@example.com")
    invitee, _, token = link_in(mail.body, "/register/").partition("?token=")
    return {"invitee": invitee, "invitation_token": token}


def reset_token(app: Flask) -> str:
    response = app.test_client().post("/me/password-reset", json={"email": MEMBER})
    assert response.status_code == 202, response.get_json()
    return link_in(queued_mail(MEMBER)[-1].body, "/password-reset/")


def email_change_token(app: Flask) -> str:
    new_address = "member@new.example"
    response = signed_in(app, MEMBER).post(
        "/me/email-update", json={"email": new_address, "password": PASSWORD}
    )
    assert response.status_code == 202, response.get_json()
    return link_in(queued_mail(new_address)[0].body, "/email-update/")


OFFERED = {"supers": "/supers/", "owners": "/locations/harbour/owners/"}


def role_offer_token(app: Flask, plural: str = "admins") -> str:
    """A role offered by a super to "plain", an active account: harbour's admin role, or
    harbour's owner role, or super rights."""
    response = signed_in(app, "super@example.com").post(
        OFFERED.get(plural, f"/locations/harbour/{plural}/"), json={"email": "plain@example.com"}
    )
    assert response.status_code == 201, response.get_json()
    return link_in(queued_mail("plain@example.com")[-1].body, "/roles/accept/")


def receipt_token(app: Flask) -> str:
    """The token of the receipt an employer vote submitted to harbour gets."""
    response = app.test_client().post(
        "/locations/harbour/votes/submit/employer", json={**SUBMISSION, "yourPosition": "Clerk"}
    )
    assert response.status_code == 201, response.get_json()
    return link_in(queued_mail(SUBMISSION["yourEmail"])[-1].body, "/votes/confirm/")


def api_token(user) -> tuple[str, str]:
    """A live token of `user`'s, as POST /me/tokens/ makes it: its id and its secret."""
    from directory_api.credentials import create_api_token

    token = create_api_token(
        user, {"name": "cron", "scopes": ["directory:read"], "expires_in_days": 30}, "dapi_"
    )
    db.session.commit()
    return str(token.id), token.secret


def build_world(app: Flask, world: dict, needs: tuple[str, ...]) -> dict[str, str]:
    """Adds to the shared world what `needs` names; returns the ids and tokens the
    request's path and body refer to."""
    harbour = world["harbour"]
    values = {"harbour": str(harbour.id)}
    if "member" in needs or "reset" in needs or "email_change" in needs:
        values["member"] = str(make_user(MEMBER).id)
    if "regions" in needs:
        values["regions"] = str(make_region("north").id)
    if "categories" in needs or "businesses" in needs or "employers" in needs:
        food = make_category("food", "Food & Drink")
        values["categories"] = str(make_category("cafes", "Cafés", parent=food).id)
    if "socials" in needs:
        values["socials"] = str(make_social("instagram").id)
    for plural, kind in (("businesses", "business"), ("employers", "employer")):
        if plural in needs:
            listing = make_listing(kind, harbour, "target", name="Harbour Works")
            values[plural] = str(listing.id)
    if "votes" in needs:
        answered = (
            {"reply_body": "Thanks!", "reply_created_at": utcnow()} if "reply" in needs else {}
        )
        values["shown"] = add_vote(harbour, active=True, **answered)
        values["hidden"] = add_vote(harbour, active=False)
    if "target_super" in needs:
        values["target"] = str(make_user("target@example.com", is_super=True).id)
    for plural, role in (("owners", Role.OWNER), ("admins", Role.ADMIN)):
        if f"target_{plural}" in needs:
            target = make_user("target@example.com", name="Target")
            grant(target, harbour, role)
            values["target"] = str(target.id)
    if "invitation" in needs:
        values |= invitation(app)
    if "reset" in needs:
        values["reset_token"] = reset_token(app)
    if "email_change" in needs:
        values["email_token"] = email_change_token(app)
    if "offer" in needs:
        values["offer_token"] = role_offer_token(app)
    for plural in ("supers", "owners", "admins"):
        if f"{plural}_offer" in needs:
            role_offer_token(app, plural)
            values["offered"] = str(world["plain"].id)
    if "receipt" in needs:
        values["receipt_token"] = receipt_token(app)
    if "api_token" in needs:
        values["api_token"], values["api_token_secret"] = api_token(world["owner"])
    if "held" in needs:
        values["held"] = held_message(harbour)
    for need, location in (("webhook", harbour), ("global_webhook", None)):
        if need in needs:
            values["webhook"], values["delivery"] = webhook_at(location)
    return values


def webhook_at(location) -> tuple[str, str]:
    """A webhook subscription of `location` (None: a global one), and a delivery of it."""
    from directory_api.models import WebhookDelivery, WebhookSubscription

    webhook = WebhookSubscription(
        location_id=location.id if location is not None else None,
        url="https://93.184.216.34/hook",
        events=["vote.submitted"],
        secret="whsec_" + "A" * 44,
    )
    db.session.add(webhook)
    db.session.flush()
    delivery = WebhookDelivery(
        subscription_id=webhook.id, event_id=uuid.uuid4(), type="webhook.test", payload="{}"
    )
    db.session.add(delivery)
    db.session.commit()
    return str(webhook.id), str(delivery.id)


def held_message(location) -> str:
    """A business vote's mail held at `location` (API.md 17), as a held submission leaves it."""
    from directory_api.models import OutboxMessage, OutboxStatus

    message = OutboxMessage(
        recipients=["desk@harbour.example"],
        template="vote",
        subject="A vote",
        body="Good bread.",
        reply_to="voter@example.org",
        status=OutboxStatus.HELD,
        about=f"location:{location.id}",
    )
    db.session.add(message)
    db.session.commit()
    return str(message.id)


def fill(template: Any, values: dict[str, str]) -> Any:
    """`template` with every string formatted with `values` (lists and dicts walked)."""
    if isinstance(template, str):
        return template.format(**values)
    if isinstance(template, dict):
        return {key: fill(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(item, values) for item in template]
    return template


# --- the matrix ------------------------------------------------------------------------------


def matrix_params() -> list[Any]:
    params = []
    for rule, method in TABLE:
        for identity in IDENTITIES:
            defect = DEFECTS.get((rule, method, identity))
            marks = [pytest.mark.xfail(strict=True, reason=f"defect: {defect}")] if defect else []
            name = f"{method} {rule} as {identity}"
            params.append(pytest.param(rule, method, identity, marks=marks, id=name))
    return params


@pytest.mark.parametrize(("rule", "method", "identity"), matrix_params())
def test_role_matrix(app, world, clients, rule, method, identity):
    case = TABLE[(rule, method)]
    values = build_world(app, world, case.needs)
    client = clients[identity]
    expected = case.outcomes[identity]
    before = database_rows() if expected >= 400 else None
    body = fill(case.body, values)
    if isinstance(body, str):
        response = client.open(
            fill(case.path, values), method=method, data=body, content_type="text/csv"
        )
    else:
        response = client.open(fill(case.path, values), method=method, json=body)
    assert response.status_code == expected, response.get_json()
    if expected >= 400:
        assert response.mimetype == PROBLEM
        assert database_rows() == before


# --- the same routes through API tokens (API.md 14) -------------------------------------------
EVERY_SCOPE = [scope.value for scope in Scope]
READ_SCOPES = ["directory:read", "votes:read", "members:read", "audit:read"]
# (whose token, its scopes, the locations it is limited to, what became of it)
TOKEN_KINDS = {
    "owner_all": ("owner", EVERY_SCOPE, None, "live"),
    "owner_read": ("owner", READ_SCOPES, None, "live"),
    "owner_at_harbour": ("owner", EVERY_SCOPE, ["harbour"], "live"),
    "owner_expired": ("owner", EVERY_SCOPE, None, "expired"),
    "owner_revoked": ("owner", EVERY_SCOPE, None, "revoked"),
    "super_all": ("super", EVERY_SCOPE, None, "live"),
    "super_at_hill": ("super", EVERY_SCOPE, ["hill"], "live"),
    "admin_all": ("admin", EVERY_SCOPE, None, "live"),
}


def token_for(world: dict, kind: str) -> str:
    """A token of TOKEN_KINDS[kind], its last use written already (a refused request must
    change no row, and a token's first use writes one)."""
    from directory_api.credentials import create_api_token

    who, scopes, locations, fate = TOKEN_KINDS[kind]
    data = {"name": kind, "scopes": scopes, "expires_in_days": 30}
    if locations is not None:
        data["locations"] = locations
    user = db.session.merge(world[who])
    token = create_api_token(user, data, "dapi_")
    token.last_used_at = utcnow()
    if fate == "expired":
        token.expires_at = utcnow() - timedelta(seconds=1)
    elif fate == "revoked":
        token.revoked_at = utcnow()
    db.session.commit()
    return token.secret


def token_params() -> list[Any]:
    return [
        pytest.param(rule, method, kind, id=f"{method} {rule} by {kind}")
        for rule, method in TABLE
        for kind in TOKEN_KINDS
    ]


@pytest.mark.parametrize(("rule", "method", "kind"), token_params())
def test_no_token_exceeds_its_user_s_roles(app, world, rule, method, kind):
    """Through any token, a route answers what its user's session gets, or a refusal: never
    more. A dead token is a 401 anywhere; a route no token may call is a 403; a token with
    every scope and no limit gets exactly what its user's session gets; any refusal is a
    problem that changed no row."""
    case = TABLE[(rule, method)]
    who, scopes, locations, fate = TOKEN_KINDS[kind]
    values = build_world(app, world, case.needs)
    secret = token_for(world, kind)
    session_outcome = case.outcomes[who]
    endpoint = next(
        r.endpoint for r in app.url_map.iter_rules() if r.rule == rule and method in r.methods
    )
    declaration = declaration_of(app.view_functions[endpoint])
    before = database_rows()
    body = fill(case.body, values)
    headers = {"Authorization": f"Bearer {secret}"}
    client = app.test_client()
    path = fill(case.path, values)
    if isinstance(body, str):
        response = client.open(
            path, method=method, data=body, content_type="text/csv", headers=headers
        )
    else:
        response = client.open(path, method=method, json=body, headers=headers)
    status = response.status_code
    if fate != "live" and getattr(app.view_functions[endpoint], "hidden_from_strangers", False):
        # /metrics: a dead token is no token (a 401 would tell a stranger it is there).
        assert status == case.outcomes["anonymous"], response.get_json()
    elif fate != "live":
        assert status == 401, response.get_json()
    elif not declaration.tokens:  # its own kind, the password, the address, sessions
        assert status == 403, response.get_json()
    elif scopes == EVERY_SCOPE and locations is None:
        assert status == session_outcome, response.get_json()
    elif declaration.access is not None:  # narrowed: refused where its scopes or places end
        _, arguments = app.url_map.bind("localhost").match(path.split("?")[0], method=method)
        place = arguments.get("slug")  # the location the path names, if it names one
        lacks = declaration.scope is not None and declaration.scope not in granted(scopes)
        # a limited token acts at its places alone: not elsewhere, nor where no place is
        limited = declaration.scope is not None and locations is not None
        elsewhere = limited and (place is None or place not in locations)
        assert status == (403 if lacks or elsewhere else session_outcome), response.get_json()
    else:  # public, where staff see more: its user's answer, or what the public gets
        assert status == session_outcome or status == 404, response.get_json()
    if status >= 400:
        assert response.mimetype == PROBLEM
        assert database_rows() == before
