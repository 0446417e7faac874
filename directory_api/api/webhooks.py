"""Webhook subscriptions (API.md 16): a location's, managed by its owners (and supers), at
/locations/:slug/webhooks, and global ones, managed by supers, at /webhooks. One piece of
code instantiated twice (`webhooks_blueprint`).

A receiver's URL is checked when it is given (platform/ssrf.py): https only (http where
WEBHOOK_ALLOW_HTTP), no credentials, and a host that resolves to public addresses only
(WEBHOOK_ALLOWED_NETWORKS opens chosen private ones). Its signing secret (`whsec_` and
base64 of 32 random bytes) is shown once, when made or rotated; the one it replaces keeps
signing for 24 hours beside it.
"""

import base64
import secrets
import uuid
from datetime import timedelta
from typing import Any

from flask import Blueprint, current_app
from sqlalchemy import Select, func, select

from ..endpoints import Access, Answer, endpoint
from ..models import Location, WebhookDelivery, WebhookSubscription, utcnow
from ..models.api_token import Scope
from ..models.webhook import GLOBAL_EVENTS, LOCATION_EVENTS, PER_LOCATION
from ..platform.errors import abort, invalid
from ..platform.extensions import db
from ..platform.limits import webhook_sends_per_account
from ..platform.page_queries import paginate
from ..platform.pagination import ListArgs
from ..platform.ssrf import Refused, checked_addresses, parse_networks
from ..schemas.webhooks import (
    DeliveryArgs,
    DeliveryOut,
    NewWebhookOut,
    WebhookIn,
    WebhookOut,
    WebhookSecretOut,
    WebhookUpdate,
)
from ..webhooks.delivery import redeliver
from ..webhooks.events import test_delivery
from .changes import apply_changes, created
from .lookups import get_or_404

ROTATION_OVERLAP = timedelta(hours=24)
DeliveryLogArgs = DeliveryArgs.sorted_by(
    {"createdAt": WebhookDelivery.created_at}, default="-createdAt"
)
WebhookArgs = ListArgs.sorted_by(
    {"createdAt": WebhookSubscription.created_at, "url": WebhookSubscription.url},
    default="createdAt",
)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def check_receiver(url: str) -> None:
    """422 on `url` unless the service may deliver there (platform/ssrf.py)."""
    config = current_app.config
    try:
        checked_addresses(
            url,
            allow_http=config["WEBHOOK_ALLOW_HTTP"],
            allowed=parse_networks(config["WEBHOOK_ALLOWED_NETWORKS"]),
        )
    except Refused as refused:
        invalid("url", str(refused))


def check_events(events: list[str], allowed: tuple[str, ...]) -> list[str]:
    """The events, each once, in the order given; 422 naming those not allowed here."""
    unknown = [event for event in events if event not in allowed]
    if unknown:
        invalid("events", f"Not events of this kind of subscription: {', '.join(unknown)}.")
    return list(dict.fromkeys(events))


def webhooks_blueprint(located: bool) -> Blueprint:
    """Subscriptions of the location in the path (owners), or the global ones (supers)."""
    name, prefix = (
        ("location_webhooks", "/locations/<slug:slug>/webhooks")
        if located
        else ("webhooks", "/webhooks")
    )
    bp = Blueprint(name, __name__, url_prefix=prefix)
    access = Access.OWNER if located else Access.SUPER
    allowed = LOCATION_EVENTS if located else GLOBAL_EVENTS
    manage = {"access": access, "scope": Scope.WEBHOOKS_MANAGE}

    def of(location: Location | None) -> Select:
        owner = location.id if location is not None else None
        return select(WebhookSubscription).where(WebhookSubscription.location_id == owner)

    def subscription(location: Location | None, webhook_id: uuid.UUID) -> WebhookSubscription:
        """The subscription of this location (or a global one), by id; else 404."""
        owner = location.id if location is not None else None
        return get_or_404(
            WebhookSubscription,
            WebhookSubscription.location_id == owner,
            WebhookSubscription.id == webhook_id,
            what="webhook",
        )

    @bp.post("/")
    @endpoint(WebhookIn, NewWebhookOut, status=201, conflicts=True, **manage)
    def create_webhook(data: dict[str, Any], location: Location | None = None):
        """Subscribe a receiver's URL to events; the answer shows its signing secret, once."""
        data["events"] = check_events(data["events"], allowed)
        check_receiver(data["url"])
        if location is not None:
            # The location's row locked first (PostgreSQL): two subscriptions made at once
            # are counted one after the other, so none passes the limit.
            db.session.execute(
                select(Location.id).where(Location.id == location.id).with_for_update()
            )
            count = select(func.count()).select_from(of(location).subquery())
            if db.session.scalar(count) >= PER_LOCATION:
                abort(409, f"A location has at most {PER_LOCATION} webhook subscriptions.")
        webhook = WebhookSubscription(location=location, secret=new_secret(), **data)
        db.session.add(webhook)
        db.session.commit()
        return created(webhook, "get_webhook", webhook_id=webhook.id)

    @bp.get("/")
    @endpoint(response=WebhookOut, query=WebhookArgs, paged=True, **manage)
    def list_webhooks(args: dict[str, Any], location: Location | None = None):
        """The subscriptions, oldest first (their secrets are never shown again)."""
        return paginate(of(location), args)

    @bp.get("/id/<uuid:webhook_id>")
    @endpoint(response=WebhookOut, **manage)
    def get_webhook(webhook_id: uuid.UUID, location: Location | None = None):
        """One subscription."""
        return subscription(location, webhook_id)

    @bp.put("/id/<uuid:webhook_id>")
    @endpoint(WebhookUpdate, WebhookOut, **manage)
    def update_webhook(
        data: dict[str, Any], webhook_id: uuid.UUID, location: Location | None = None
    ):
        """Change its URL, events, description, or whether it is enabled."""
        webhook = subscription(location, webhook_id)
        if "events" in data:
            data["events"] = check_events(data["events"], allowed)
        if "url" in data:
            check_receiver(data["url"])
        if data.get("enabled") is True:
            data["disabled_reason"], data["failing_since"] = None, None
        apply_changes(webhook, data)
        db.session.commit()
        return webhook

    @bp.delete("/id/<uuid:webhook_id>")
    @endpoint(status=204, **manage)
    def delete_webhook(webhook_id: uuid.UUID, location: Location | None = None):
        """Delete the subscription."""
        db.session.delete(subscription(location, webhook_id))
        db.session.commit()

    @bp.post("/id/<uuid:webhook_id>/rotate-secret")
    @endpoint(response=WebhookSecretOut, **manage)
    def rotate_secret(webhook_id: uuid.UUID, location: Location | None = None):
        """A new signing secret, shown once; for 24 hours deliveries carry a signature with
        each, so the receiver can change its copy without losing one."""
        webhook = subscription(location, webhook_id)
        webhook.previous_secret, webhook.secret = webhook.secret, new_secret()
        webhook.previous_secret_until = utcnow() + ROTATION_OVERLAP
        db.session.commit()
        return Answer(
            {"secret": webhook.secret, "previous_valid_until": webhook.previous_secret_until}
        )

    @bp.get("/id/<uuid:webhook_id>/deliveries/")
    @endpoint(response=DeliveryOut, query=DeliveryLogArgs, paged=True, **manage)
    def list_deliveries(
        args: dict[str, Any], webhook_id: uuid.UUID, location: Location | None = None
    ):
        """Its delivery log, newest first (kept WEBHOOK_LOG_DAYS): each event, its attempts
        and the receiver's last answer."""
        webhook = subscription(location, webhook_id)
        stmt = select(WebhookDelivery).where(WebhookDelivery.subscription_id == webhook.id)
        if "status" in args:
            stmt = stmt.where(WebhookDelivery.status == args["status"])
        return paginate(stmt, args)

    @bp.post("/id/<uuid:webhook_id>/deliveries/id/<uuid:delivery_id>/redeliver")
    @endpoint(response=DeliveryOut, status=202, limits=(webhook_sends_per_account,), **manage)
    def redeliver_delivery(
        webhook_id: uuid.UUID, delivery_id: uuid.UUID, location: Location | None = None
    ):
        """Send an event again, as a new delivery with the same `webhook-id` (the receiver
        may drop it as a repeat), due now."""
        webhook = subscription(location, webhook_id)
        delivery = get_or_404(
            WebhookDelivery,
            WebhookDelivery.subscription_id == webhook.id,
            WebhookDelivery.id == delivery_id,
            what="delivery",
        )
        again = redeliver(delivery)
        db.session.commit()
        return again

    @bp.post("/id/<uuid:webhook_id>/test")
    @endpoint(response=DeliveryOut, status=202, limits=(webhook_sends_per_account,), **manage)
    def test_webhook(webhook_id: uuid.UUID, location: Location | None = None):
        """Queue a `webhook.test` event for this subscription alone (whatever its events)."""
        webhook = subscription(location, webhook_id)
        if not webhook.enabled:
            abort(409, "This subscription is disabled: enable it to test it.")
        delivery = test_delivery(webhook, location)
        db.session.commit()
        return delivery

    return bp


location_webhooks = webhooks_blueprint(located=True)
global_webhooks = webhooks_blueprint(located=False)
