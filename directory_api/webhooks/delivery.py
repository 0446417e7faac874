"""Delivering webhook events (API.md 16): the outbox worker's second queue.

Each delivery (written with its change, webhooks/events.py) is claimed by a lease
(platform/leases.py: several workers never send one at once; one whose worker died is
sent again once its lease runs out), signed the Standard Webhooks way and POSTed to its
subscription's URL through the address guard (platform/outbound.py), with no transaction
open meanwhile. The outcome:

- a 2xx within the time allowed: delivered; the subscription is no longer failing;
- a 410: failed, and the subscription is disabled at once;
- anything else (a redirect, an error status, a refused address, no answer): tried again
  after `SCHEDULE` (a `Retry-After` on a 429 or 503 waits longer if it asks), and failed
  after the last; a subscription whose deliveries have all failed for `FAILING_FOR` is
  disabled. A disabled subscription's owners are mailed; its pending deliveries wait
  until it is enabled again.

The worker runs these in threads of their own (cli.py), so a slow receiver never delays
mail.
"""

import email.utils
import http.client
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from flask import current_app
from sqlalchemy import delete, func, select, update
from standardwebhooks import Webhook

from ..access import owner_addresses
from ..models import (
    DeliveryStatus,
    Location,
    User,
    UserStatus,
    WebhookDelivery,
    WebhookSubscription,
    utcnow,
)
from ..models.webhook import ERROR_LENGTH, RESPONSE_KEPT
from ..openapi import VERSION
from ..platform.extensions import db
from ..platform.leases import Claim, claim_next, settle
from ..platform.outbound import TimeUp, post
from ..platform.outbox import lease, queue_mail
from ..platform.ssrf import Refused, parse_networks

log = logging.getLogger(__name__)

# After each failed attempt, the wait before the next (API.md 16): ten attempts in all.
SCHEDULE = (
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
    timedelta(hours=14),
    timedelta(hours=20),
    timedelta(hours=24),
)
ATTEMPTS = len(SCHEDULE) + 1
LONGEST_WAIT = timedelta(hours=24)  # what a Retry-After may ask at most
FAILING_FOR = timedelta(days=5)
USER_AGENT = f"directory-api-webhooks/{VERSION}"
GONE = "The receiver answered 410 Gone."
KEPT_FAILING = "Every delivery failed for 5 days."
GAVE_UP = "Given up: its attempts never ended with an outcome recorded."


@dataclass
class Receiver:
    """What an attempt needs of its subscription, read before the network is touched."""

    url: str
    secrets: list[str]
    location_id: uuid.UUID | None


def signature(secrets: list[str], message_id: str, at: datetime, body: str) -> str:
    """`webhook-signature`: a `v1,<base64>` per secret, space-separated."""
    return " ".join(Webhook(secret).sign(message_id, at, body) for secret in secrets)


def headers(delivery: WebhookDelivery, receiver: Receiver, at: datetime) -> dict[str, str]:
    message_id = str(delivery.event_id)
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature(receiver.secrets, message_id, at, delivery.payload),
    }


def receiver_of(delivery: WebhookDelivery) -> Receiver | None:
    """Its subscription's URL and signing secrets (the previous one while it still signs);
    None if the subscription is gone or no longer enabled. Ends the read's transaction."""
    subscription = db.session.get(WebhookSubscription, delivery.subscription_id)
    receiver = None
    if subscription is not None and subscription.enabled:
        secrets = [subscription.secret]
        until = subscription.previous_secret_until
        if subscription.previous_secret and until is not None and until > utcnow():
            secrets.append(subscription.previous_secret)
        receiver = Receiver(subscription.url, secrets, subscription.location_id)
    db.session.rollback()
    return receiver


def retry_after(reply: Any) -> timedelta | None:
    """The wait a 429 or 503 asks for (seconds or an HTTP date), at most LONGEST_WAIT; None
    when it asks none, or asks it in a way that is not HTTP's."""
    if reply is None or reply.status not in (429, 503):
        return None
    value = reply.headers.get("retry-after", "").strip()
    if value.isascii() and value.isdigit():
        seconds = int(value[:12])  # a day is 5 digits: more is "as long as may be"
        return min(timedelta(seconds=min(seconds, 10**9)), LONGEST_WAIT)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(when - utcnow(), timedelta(0)), LONGEST_WAIT)


def kept_text(text: str, length: int) -> str:
    """Text a receiver chose, as a column may keep it: no NUL (PostgreSQL refuses it)."""
    return text.replace("\x00", "\ufffd")[:length]


def attempt(delivery: WebhookDelivery, receiver: Receiver, seconds_left: float) -> Any:
    """POST it once; the reply, or the Failure that stood for one."""
    config = current_app.config
    timeout = max(min(config["WEBHOOK_TIMEOUT"], seconds_left), 0.1)
    try:
        return post(
            receiver.url,
            delivery.payload.encode(),
            headers(delivery, receiver, datetime.now(UTC)),
            timeout=timeout,
            allow_http=config["WEBHOOK_ALLOW_HTTP"],
            allowed=parse_networks(config["WEBHOOK_ALLOWED_NETWORKS"]),
            keep=RESPONSE_KEPT,
        )
    except Refused as refused:
        return Failure(f"Refused: {refused}")
    except TimeUp:
        return Failure(f"Timeout: no answer within {timeout:g}s")
    except (OSError, http.client.HTTPException) as error:
        return Failure(f"{type(error).__name__}: {error}")


@dataclass
class Failure:
    error: str
    status: None = None


@dataclass
class WebhookReport:
    delivered: int = 0
    failed: int = 0


def deliver_due_webhooks(limit: int = 100) -> WebhookReport:
    """Attempt every due delivery of an enabled subscription (up to `limit`)."""
    report = WebhookReport()
    enabled = WebhookDelivery.subscription_id.in_(
        select(WebhookSubscription.id).where(WebhookSubscription.enabled)
    )
    for _ in range(limit):
        claim = claim_next(WebhookDelivery, DeliveryStatus.PENDING, lease(), enabled)
        if claim is None:
            break
        if deliver(claim):
            report.delivered += 1
        else:
            report.failed += 1
    return report


def deliver(claim: Claim[WebhookDelivery]) -> bool:
    """One attempt of a claimed delivery, its outcome recorded; whether it was delivered."""
    delivery = claim.row
    if claim.attempt > ATTEMPTS:  # claimed again and again by passes that never settled
        settle(claim, DeliveryStatus.PENDING, status=DeliveryStatus.FAILED, error=GAVE_UP)
        return False
    receiver = receiver_of(delivery)
    if receiver is None:  # disabled or deleted since it was claimed: it waits (or is gone)
        settle(claim, DeliveryStatus.PENDING, attempts=claim.attempt - 1, next_attempt_at=utcnow())
        return False
    started = utcnow()
    reply = attempt(delivery, receiver, claim.deadline - time.monotonic())
    try:
        delivered = record(claim, receiver, reply, started)
    except Exception:  # what a receiver answered must never leave a delivery in limbo
        db.session.rollback()
        log.exception("webhook %s: the outcome of attempt %d failed", delivery.id, claim.attempt)
        settle(
            claim,
            DeliveryStatus.PENDING,
            attempted_at=started,
            error="The receiver's answer could not be recorded.",
            next_attempt_at=utcnow() + next_wait(claim, None),
        )
        return False
    return delivered


def next_wait(claim: Claim[WebhookDelivery], reply: Any) -> timedelta:
    return max(SCHEDULE[min(claim.attempt, len(SCHEDULE)) - 1], retry_after(reply) or timedelta(0))


def record(
    claim: Claim[WebhookDelivery], receiver: Receiver, reply: Any, started: datetime
) -> bool:
    """Settle the attempt and, only if this worker's claim still stands, what it tells of
    its subscription (as it was when attempted: a URL changed since is not judged by it)."""
    delivery = claim.row
    status = reply.status
    delivered = status is not None and 200 <= status < 300
    outcome: dict[str, Any] = {
        "attempted_at": started,
        "response_status": status,
        "duration_ms": int((utcnow() - started).total_seconds() * 1000),
        "error": None
        if delivered
        else kept_text(reply.error if status is None else f"HTTP {status}", ERROR_LENGTH),
        "response": None
        if status is None
        else kept_text(reply.body.decode("utf-8", "replace"), RESPONSE_KEPT),
    }
    if delivered:
        outcome["status"] = DeliveryStatus.DELIVERED
    elif status == 410 or claim.attempt >= ATTEMPTS:
        outcome["status"] = DeliveryStatus.FAILED
    else:
        outcome["next_attempt_at"] = utcnow() + next_wait(claim, reply)
    subscription = Subscription(delivery.subscription_id, receiver.url)

    def judge_subscription() -> None:
        if delivered:
            subscription.succeeded()
        elif status == 410:
            subscription.disable(GONE)
        elif subscription.failing_since(started) <= utcnow() - FAILING_FOR:
            subscription.disable(KEPT_FAILING)

    log.log(
        logging.INFO if delivered else logging.WARNING,
        "webhook %s (%s) to subscription %s, attempt %d: %s",
        delivery.id,
        delivery.type,
        delivery.subscription_id,
        claim.attempt,
        "delivered" if delivered else outcome["error"],
    )
    settle(claim, DeliveryStatus.PENDING, then=judge_subscription, **outcome)
    return delivered


@dataclass
class Subscription:
    """A subscription as an attempt saw it: each change applies only while it is enabled
    with the URL attempted (an owner who fixed the URL meanwhile is not overruled)."""

    id: uuid.UUID
    url: str

    def _update(self) -> Any:
        return update(WebhookSubscription).where(
            WebhookSubscription.id == self.id,
            WebhookSubscription.url == self.url,
            WebhookSubscription.enabled,
        )

    def succeeded(self) -> None:
        db.session.execute(
            self._update()
            .where(WebhookSubscription.failing_since.is_not(None))
            .values(failing_since=None)
        )

    def failing_since(self, started: datetime) -> datetime:
        """Since when its deliveries have all failed (now marked, if they had not)."""
        since = db.session.scalar(
            self._update()
            .values(failing_since=func.coalesce(WebhookSubscription.failing_since, started))
            .returning(WebhookSubscription.failing_since)
        )
        return since or started

    def disable(self, reason: str) -> None:
        """Disable it, saying why, and mail those who manage it (its location's owners, or
        the supers for a global one)."""
        changed = db.session.execute(
            self._update()
            .values(enabled=False, disabled_reason=reason)
            .returning(WebhookSubscription.location_id, WebhookSubscription.events)
        ).first()
        if changed is None:
            return
        location = (
            db.session.get(Location, changed.location_id)
            if changed.location_id is not None
            else None
        )
        recipients = managers(location)
        if recipients:
            queue_mail(
                recipients,
                "webhook_disabled",
                subscription=SimpleNamespace(id=self.id, events=changed.events),
                location=location,
                reason=reason,
            )
        log.warning("webhook subscription %s disabled: %s", self.id, reason)


def managers(location: Location | None) -> list[str]:
    """Who manages a location's subscriptions (its owners), or the global ones (supers)."""
    if location is not None:
        return owner_addresses(location)
    supers = select(User.email).where(User.is_super, User.status == UserStatus.ACTIVE)
    return list(db.session.scalars(supers.order_by(User.email)))


def redeliver(delivery: WebhookDelivery) -> WebhookDelivery:
    """A new delivery of the same event (the same `webhook-id`), due now."""
    again = WebhookDelivery(
        subscription_id=delivery.subscription_id,
        event_id=delivery.event_id,
        type=delivery.type,
        payload=delivery.payload,
    )
    db.session.add(again)
    return again


def purge_webhook_log(now: datetime | None = None) -> int:
    """Delete deliveries older than WEBHOOK_LOG_DAYS that are over (delivered or failed)."""
    days = current_app.config["WEBHOOK_LOG_DAYS"]
    cutoff = (now or utcnow()) - timedelta(days=days)
    purged = db.session.execute(
        delete(WebhookDelivery).where(
            WebhookDelivery.created_at < cutoff,
            WebhookDelivery.status != DeliveryStatus.PENDING,
        )
    ).rowcount
    db.session.commit()
    return purged
