"""What `GET /metrics` shows of the directory (API.md 18): the counters its views bump
(votes submitted, sign-ins), and the backlogs an operator alerts on, read at scrape time.
Each backlog is one cheap statement (the votes awaiting moderation come from the stored
counts, not from counting votes), read at most every 15 s per process
(platform/metrics.py)."""

from collections.abc import Iterable

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import func, select

from .models import DeliveryStatus, OutboxMessage, OutboxStatus, VoteRevision, WebhookDelivery
from .platform.extensions import db
from .platform.types import utcnow

VOTES = Counter(
    "votes_submitted",
    "Public submissions taken, by type and outcome (accepted, or held as possibly automated).",
    ["type", "outcome"],
)
SIGN_INS = Counter("sign_ins", "Sign-in attempts, by result (succeeded, failed).", ["result"])

OUTBOX_DUE = select(
    func.count(),
    func.min(OutboxMessage.next_attempt_at),
    # Whose last attempt failed: SMTP's trouble, seen from the web (the outbox worker is a
    # process of its own, whose counters no scrape of gunicorn's reads).
    func.count(OutboxMessage.last_error),
).where(OutboxMessage.status == OutboxStatus.PENDING)
AWAITING_MODERATION = select(func.coalesce(func.sum(VoteRevision.pending), 0))
WEBHOOKS_PENDING = select(func.count()).where(WebhookDelivery.status == DeliveryStatus.PENDING)


def backlogs() -> Iterable[Metric]:
    try:
        pending, oldest, retrying = db.session.execute(OUTBOX_DUE).one()
        awaiting = db.session.scalar(AWAITING_MODERATION)
        webhooks = db.session.scalar(WEBHOOKS_PENDING)
    finally:
        db.session.rollback()
    age = (utcnow() - oldest).total_seconds() if oldest is not None else 0.0
    yield GaugeMetricFamily("outbox_pending", "Mail waiting to be sent.", value=pending)
    yield GaugeMetricFamily(
        "outbox_oldest_pending_age_seconds",
        "How long the mail waiting longest has waited (0: none waits).",
        value=max(age, 0.0),
    )
    yield GaugeMetricFamily(
        "outbox_retrying",
        "Mail waiting again after a failed attempt (SMTP refused or did not answer).",
        value=retrying,
    )
    yield GaugeMetricFamily(
        "votes_awaiting_moderation", "Votes not yet active, at every location.", value=awaiting
    )
    yield GaugeMetricFamily(
        "webhook_deliveries_pending", "Webhook deliveries not yet delivered.", value=webhooks
    )
