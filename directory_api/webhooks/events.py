"""Webhook events (API.md 16): what changed, written for the subscriptions that want it in
the transaction of the change itself.

- `after_flush` notes what changed among the objects events are about (`KINDS`): created,
  updated (a field a client sees changed) or deleted; a vote submitted, confirmed or
  withdrawn; a vote's reply created, changed or deleted. Changes of one object in one
  transaction are one event (created then changed: created; created then deleted: none).
- `before_commit` writes one delivery per event and subscription that wants it, in one
  statement (INSERT … SELECT over the subscriptions: no query to find them first). A
  rolled-back change writes none, a committed one never loses its events; the outbox
  worker delivers them (webhooks/delivery.py).
- A change nobody listens to costs no statement: a write loads with its path's location
  whether an enabled subscription (its own or a global one) is there (`Location.listened`).
  A subscription made while a change is under way may miss that change's events.

Payloads are thin and hold no personal data: `{"type", "timestamp", "location", "data"}`,
`data` being the public representation of what changed (a vote's only `VOTE_FIELDS`), or
its id and slug when deleted (or when the representation would pass `PAYLOAD_LIMIT`).
What goes with a deleted row in the database (a location's listings) has no events.
"""

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import orjson
from sqlalchemy import String, Text, bindparam, inspect, literal, or_, select
from sqlalchemy.orm import Session, SessionTransaction

from ..audit import AUDITED
from ..models import (
    Business,
    Category,
    DeliveryStatus,
    Employer,
    Location,
    Region,
    Social,
    Vote,
    WebhookDelivery,
    WebhookSubscription,
    utcnow,
)
from ..platform.extensions import db
from ..platform.output import schema_instance, timestamp_text
from ..platform.sql import json_list_has, random_uuid
from ..platform.types import UTCDateTime
from ..schemas.categories import CategoryOut
from ..schemas.listings import ListingOut
from ..schemas.locations import LocationOut
from ..schemas.regions import RegionOut
from ..schemas.socials import SocialOut

PAYLOAD_LIMIT = 20 * 1024  # bytes
NOTED = "webhook_events"  # session.info: the transaction's events so far
WITHDRAWN = "webhook_withdrawn"  # session.info: votes their submitters withdraw

# What events are about: the kind each is named by, and its public representation.
KINDS: dict[type, tuple[str, type | None]] = {
    Region: ("region", RegionOut),
    Category: ("category", CategoryOut),
    Social: ("social", SocialOut),
    Location: ("location", LocationOut),
    Business: ("business", ListingOut),
    Employer: ("employer", ListingOut),
    Vote: ("vote", None),  # VOTE_FIELDS only
}
VERBS = {"new": "created", "dirty": "updated", "deleted": "deleted"}
# A vote's `data`: nothing that names or reaches its submitter, nor what they wrote.
VOTE_FIELDS = ("id", "type", "active", "employer", "confirmed", "createdAt", "updatedAt")
# A vote's changes that are events of their own (confirmed, the reply), or none (what
# only the submitter's data export and erasure see).
VOTE_OWN_EVENTS = frozenset({"confirmed", "reply_body", "your_name", "your_email", "your_phone"})


@dataclass
class Event:
    name: str
    target: Any  # the object it is about
    gone: dict[str, Any] | None = None  # a deleted one's id and slug, taken when deleted

    @property
    def location_id(self) -> uuid.UUID | None:
        """The location it happened at (a location's own: itself); None: a reference list."""
        target = self.target
        return target.id if isinstance(target, Location) else getattr(target, "location_id", None)


def watched_fields(model: type) -> tuple[str, ...]:
    """The fields whose change makes an `<kind>.updated`: those the audit log records."""
    fields = AUDITED[model].fields
    return tuple(name for name in fields if not (model is Vote and name in VOTE_OWN_EVENTS))


WATCHED = {model: watched_fields(model) for model in KINDS}


def changed(obj: Any, names: tuple[str, ...]) -> bool:
    attrs = inspect(obj).attrs
    return any(attrs[name].history.has_changes() for name in names)


def deleted_in_bulk(
    session: Session, model: type, rows: Iterable[tuple[uuid.UUID, uuid.UUID | None]]
) -> None:
    """Rows a statement deletes (not through the session: its flushes never see them), as
    (id, location id): their `<kind>.deleted` events, written with the transaction."""
    kind = KINDS[model][0]
    events = session.info.setdefault(NOTED, {})
    for ident, location_id in rows:
        gone = SimpleNamespace(id=ident, location_id=location_id)
        events[(kind, ident)] = Event(f"{kind}.deleted", gone, gone={"id": str(ident)})


def withdrawing(vote: Vote, session: Session) -> None:
    """`vote` is deleted because its submitter withdrew it: `vote.withdrawn`, not
    `vote.deleted`."""
    session.info.setdefault(WITHDRAWN, set()).add(vote.id)


def _note(events: dict[Any, Event], key: Any, event: Event) -> None:
    """One event per object and family in a transaction: created then changed is created,
    created then deleted is nothing, changed then deleted is deleted."""
    before = events.get(key)
    if before is None:
        events[key] = event
    elif event.gone is not None:  # deleted (or withdrawn)
        if before.name.endswith((".created", ".submitted")):
            del events[key]
        else:
            events[key] = event
    # else: a change after its creation or an earlier change: the first name stands


def _gone(obj: Any) -> dict[str, Any]:
    gone = {"id": str(obj.id)}
    if hasattr(obj, "slug"):
        gone["slug"] = obj.slug
    return gone


def _vote_events(session: Session, vote: Vote, state: str) -> list[tuple[Any, Event]]:
    found = []
    if state == "new":
        found.append((("vote", vote), Event("vote.submitted", vote)))
    elif state == "deleted":
        withdrawn = vote.id in session.info.get(WITHDRAWN, ())
        name = "vote.withdrawn" if withdrawn else "vote.deleted"
        found.append((("vote", vote), Event(name, vote, gone=_gone(vote))))
    else:
        attrs = inspect(vote).attrs
        confirmed = attrs.confirmed.history
        if confirmed.has_changes() and vote.confirmed:
            found.append((("vote.confirmed", vote), Event("vote.confirmed", vote)))
        reply = attrs.reply_body.history
        if reply.has_changes():
            before = reply.deleted[0] if reply.deleted else None
            verb = (
                "created" if before is None else "deleted" if vote.reply_body is None else "updated"
            )
            gone = {"vote": str(vote.id)} if verb == "deleted" else None
            found.append((("reply", vote), Event(f"reply.{verb}", vote, gone=gone)))
        if changed(vote, WATCHED[Vote]):
            found.append((("vote", vote), Event("vote.updated", vote)))
    return found


def _collect(session: Session, flush_context: Any) -> None:
    """What this flush wrote, from its own list of states (the session's `dirty`, which
    looks at every loaded object, costs more)."""
    events = None
    for state, (deleted, list_only) in flush_context.states.items():
        model = state.class_
        if list_only or model not in KINDS:
            continue
        obj = state.obj()
        status = "deleted" if deleted else "new" if state.key is None else "dirty"
        if events is None:
            events = session.info.setdefault(NOTED, {})
        if model is Vote:
            for key, event in _vote_events(session, obj, status):
                _note(events, key, event)
            continue
        if status == "dirty" and not changed(obj, WATCHED[model]):
            continue  # counts, revisions: nothing a client sees
        kind = KINDS[model][0]
        gone = _gone(obj) if status == "deleted" else None
        _note(events, (kind, obj), Event(f"{kind}.{VERBS[status]}", obj, gone=gone))


# Writing the deliveries ---------------------------------------------------------------------

_subscriptions = WebhookSubscription.__table__
# One delivery per subscription that wants the event: enabled, of the event's location or
# global, and listing the event. Built once; run once per transaction for all its events.
WRITE_DELIVERIES = WebhookDelivery.__table__.insert().from_select(
    [
        "id",
        "subscription_id",
        "event_id",
        "type",
        "payload",
        "status",
        "attempts",
        "next_attempt_at",
        "created_at",
    ],
    select(
        random_uuid(),
        _subscriptions.c.id,
        bindparam("event_id", type_=WebhookDelivery.__table__.c.event_id.type),
        bindparam("type", type_=String()),
        bindparam("payload", type_=Text()),
        literal(DeliveryStatus.PENDING.value, String()),
        literal(0),
        bindparam("now", type_=UTCDateTime()),
        bindparam("now", type_=UTCDateTime()),
    ).where(
        _subscriptions.c.enabled,
        or_(
            _subscriptions.c.location_id
            == bindparam("location_id", type_=_subscriptions.c.id.type),
            _subscriptions.c.location_id.is_(None),
        ),
        json_list_has(_subscriptions.c.events, bindparam("type", type_=String())),
    ),
)


# The class an identity key names: an employer is kept as a listing (one table).
IDENTITY = {model: model.__mapper__.base_mapper.class_ for model in (Location, Employer)}


KNOWN_SLUGS = "webhook_known_slugs"


def known_slug(model: type, ident: Any, slug: str) -> None:
    """Tell the events of the transaction under way the slug of a location or an employer
    read as columns, not loaded: they name it without reading it again."""
    db.session.info.setdefault(KNOWN_SLUGS, {})[(model, ident)] = slug


class Payloads:
    """Builds each event's body, looking up (once per transaction) what it names."""

    def __init__(self, session: Session, known: dict[tuple[type, Any], str] | None = None) -> None:
        self.session = session
        self.now = utcnow()
        self.slugs: dict[tuple[type, Any], str | None] = {**(known or {})}

    def slug_of(self, model: type, ident: Any) -> str | None:
        """A location's or an employer's slug: from the session when loaded, else read."""
        if ident is None:
            return None
        key = (model, ident)
        if key not in self.slugs:
            # From the session's identity map (its key built here: cheaper than `get`'s
            # way to it), else read.
            found = self.session.identity_map.get((IDENTITY[model], (ident,), None))
            if found is None:
                found = self.session.get(model, ident)
            self.slugs[key] = found.slug if found is not None else None
        return self.slugs[key]

    def data(self, event: Event) -> dict[str, Any]:
        target = event.target
        if event.gone is not None:
            return event.gone
        if isinstance(target, Vote):
            if event.name.startswith("reply."):
                return {
                    "vote": str(target.id),
                    "body": target.reply_body,
                    "createdAt": timestamp_text(target.reply_created_at),
                    "updatedAt": timestamp_text(target.reply_updated_at),
                }
            return {
                "id": str(target.id),
                "type": target.type.value,
                "active": target.active,
                "employer": self.slug_of(Employer, target.employer_id),
                "confirmed": target.confirmed,
                "createdAt": timestamp_text(target.created_at),
                "updatedAt": timestamp_text(target.updated_at),
            }
        schema = KINDS[type(target)][1]
        return schema_instance(schema).dump(target)

    def body(self, event: Event) -> str:
        target = event.target
        location = (
            target.slug
            if isinstance(target, Location)
            else self.slug_of(Location, event.location_id)
        )
        envelope = {
            "type": event.name,
            "timestamp": timestamp_text(self.now),
            "location": location,
            "data": self.data(event),
        }
        body = orjson.dumps(envelope)
        if len(body) > PAYLOAD_LIMIT:  # what a receiver may fetch with an API token
            envelope["data"] = _gone(event.target)
            body = orjson.dumps(envelope)
        return body.decode()


def test_delivery(subscription: WebhookSubscription, location: Location | None) -> WebhookDelivery:
    """A `webhook.test` event for `subscription` alone, due now."""
    payloads = Payloads(db.session())
    envelope = {
        "type": "webhook.test",
        "timestamp": timestamp_text(payloads.now),
        "location": location.slug if location is not None else None,
        "data": {"webhook": str(subscription.id)},
    }
    delivery = WebhookDelivery(
        subscription_id=subscription.id,
        event_id=uuid.uuid4(),
        type="webhook.test",
        payload=orjson.dumps(envelope).decode(),
    )
    db.session.add(delivery)
    return delivery


def listened(session: Session, location_id: uuid.UUID | None) -> bool:
    """Whether a subscription may want an event at `location_id`: False only when the
    location was loaded knowing that none does (a write's path location)."""
    if location_id is None:
        return True  # the reference lists: global subscriptions only, asked in the statement
    # Its identity key as the session keeps it (built here: the mapper's helper costs more).
    location = session.identity_map.get((Location, (location_id,), None))
    return location is None or vars(location).get("listened", True)


def _write(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint: the events go with the transaction's own commit
    session.flush()  # what the commit would flush has its events too (nothing when clean)
    events: dict[Any, Event] = session.info.pop(NOTED, None)
    known = session.info.pop(KNOWN_SLUGS, {})
    if not events:
        return
    heard = [event for event in events.values() if listened(session, event.location_id)]
    session.info.pop(WITHDRAWN, None)
    if not heard:
        return
    payloads = Payloads(session, known)
    rows = [
        {
            "event_id": uuid.uuid4(),
            "type": event.name,
            "payload": payloads.body(event),
            "now": payloads.now,
            "location_id": event.location_id,
        }
        for event in heard
    ]
    # One event (a submission, an edit) is one plain execution; more, one executemany.
    session.execute(WRITE_DELIVERIES, rows[0] if len(rows) == 1 else rows)


def _forget(session: Session, transaction: SessionTransaction) -> None:
    """A transaction that ended without committing takes its events along."""
    if transaction.parent is None:
        for kept in (NOTED, WITHDRAWN, KNOWN_SLUGS):
            session.info.pop(kept, None)


# Registered by create_app (events.py).
LISTENERS: tuple[tuple[Any, str, Callable[..., Any], dict[str, Any]], ...] = (
    (Session, "after_flush", _collect, {}),
    (Session, "before_commit", _write, {}),
    (Session, "after_transaction_end", _forget, {}),
)
