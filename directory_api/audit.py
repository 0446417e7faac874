"""The audit log (API.md 10): one mechanism, the database session's own events.

- `before_flush` reads every new, changed or deleted object of an audited model in the
  session: what it is (`AUDITED`: what each audited model declares of itself in its
  `__audit__`, its type and the fields an entry shows) and what changed,
  from the attributes' history. Changes are kept per target for the transaction, so an
  object flushed twice before its commit still makes one entry.
- `before_commit` writes the entries, in the transaction of the change they record: a
  write that fails leaves no entry, and an entry that fails leaves no write. A rollback
  forgets them.
- Roles are entries of their own (`owner.grant`, `admin.remove`, `super.accept`,
  `owner.withdraw` …), from the rows that hold them: memberships, the super flag, offers
  (an offer deleted through the session is withdrawn). An invitation that creates an
  account is recorded as its grant. Accepting an offer is an entry even when it changes
  nothing.
- Sign-in, failed sign-in and sign-out change no audited field, nor does staff's release
  or discard of a held message (`mail.release|discard`): the views say so with `record`
  (and a failed sign-in commits its entry before answering 401).

Whose change: the signed-in user's. A password or an address is changed only by its
account (with its password or through a mailed link), which is then the actor. With nobody
signed in, only such changes to an account are recorded; the public's votes and receipts
are not privileged writes and are not recorded.

Personal data never enters an entry: a vote's `yourName`, `yourEmail`, `yourPhone` and
every password show `["[redacted]", "[redacted]"]` when they change. Changes to a user's
own details belong to no location, so only supers see them.
"""

import enum
import ipaddress
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from flask import g, has_request_context, request
from flask_login import current_user
from sqlalchemy import delete, func, insert, inspect, select
from sqlalchemy.orm import Session, SessionTransaction

from .models import AuditCount, AuditEntry, Location, Membership, RoleGrant, User
from .models.base import Audit
from .platform.extensions import db
from .platform.output import timestamp_text

REDACTED = "[redacted]"


def _declared() -> dict[type, Audit]:
    """Every model that declares what it audits (`__audit__`, models/base.py), with its
    entries' type (a business or an employer: the listing's kind)."""
    found = {}
    for mapper in db.Model.registry.mappers:
        rule = getattr(mapper.class_, "__audit__", None)
        kind = rule and (rule.type or mapper.polymorphic_identity)
        if kind:  # the shared base of businesses and employers has none of its own
            found[mapper.class_] = replace(rule, type=kind)
    return found


AUDITED: dict[type, Audit] = _declared()
# Targets that only `record` names (no audited model): a held message staff decide on.
RECORDED_TYPES = frozenset({"mail"})


def path_location() -> Location | None:
    """The location the request's path names (loaded by `@endpoint`), if any: where a
    change to a user made through it belongs."""
    return g.get("path_location")


def entry_location(obj: Any, audited: Audit) -> Location | None:
    """Where an entry about `obj` belongs: a location itself, or the one a located model
    names (a new listing may have only its relationship set)."""
    if isinstance(obj, Location):
        return obj
    if audited.located:
        return _get(Location, obj.location_id) or getattr(obj, "location", None)
    return None


# Attribute → the name clients use, where it is not just the camelCase of it.
FIELD_NAMES = {"password_hash": "password"}
# A user's changes are one entry, named by the most telling of them.
USER_ACTIONS = (("password_hash", "password_change"), ("email", "email_change"))


def _get(model: Any, ident: Any) -> Any:
    """A row by id: from the identity map when loaded (no query inside a flush)."""
    return None if ident is None else db.session.get(model, ident)


def field_name(attribute: str) -> str:
    if attribute in FIELD_NAMES:
        return FIELD_NAMES[attribute]
    head, *rest = attribute.split("_")
    return head + "".join(word.title() for word in rest)


def shown(value: Any) -> Any:
    """A value as an entry keeps it (JSON)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return timestamp_text(value)
    if isinstance(value, list):  # social links (none is null), or plain values (scopes)
        if value and all(isinstance(item, str) for item in value):
            return value
        return [{"social": link.social.slug, "url": link.url} for link in value] or None
    if hasattr(value, "slug"):  # a related row: its slug
        return value.slug
    return value


# Reading the changes ------------------------------------------------------------------------


def _values(obj: Any, attribute: str) -> tuple[Any, Any] | None:
    """(old, new) of one attribute of a changed object, as the database had it and as it
    will have it after this flush; None when it did not change. An attribute that did not
    change is never read: reading an unloaded one would cost a query per object."""
    attr = inspect(obj).attrs[attribute]
    history = attr.history  # never loads anything
    prop = inspect(type(obj)).relationships.get(attribute)
    if prop is None:
        if not history.has_changes():
            return None
        return (history.deleted[0] if history.deleted else None), attr.value
    if prop.uselist:  # socials: the whole list, before and after
        if not history.has_changes():
            return None
        before = sorted([*history.unchanged, *history.deleted], key=lambda link: link.position)
        return before, attr.value
    if history.has_changes():
        old = history.deleted[0] if history.deleted else _related_before(obj, prop)
        return old, attr.value
    # Not assigned: its foreign key may have been (an id set directly).
    column_history = inspect(obj).attrs[_foreign_key(prop)].history
    if not column_history.has_changes():
        return None
    old_id = column_history.deleted[0] if column_history.deleted else None
    return _get(prop.mapper.class_, old_id), _named_by_key(obj, prop)


def _new_value(obj: Any, attribute: str) -> Any:
    """An attribute of a new object; for a many-to-one relationship left unassigned, the row
    its foreign key names (a new vote is given its employer's id: api/votes.py)."""
    value = getattr(obj, attribute)
    prop = inspect(type(obj)).relationships.get(attribute) if value is None else None
    if prop is None or prop.uselist:
        return value
    return _named_by_key(obj, prop)


def _related_before(obj: Any, prop: Any) -> Any:
    """The row a many-to-one relationship named before it was assigned, when the old value
    was never loaded: its foreign key still holds it until the flush."""
    if inspect(obj).transient or inspect(obj).pending:
        return None
    return _named_by_key(obj, prop)


def _foreign_key(prop: Any) -> str:
    """The attribute holding a many-to-one relationship's foreign key."""
    return next(iter(prop.local_columns)).key


def _named_by_key(obj: Any, prop: Any) -> Any:
    """The row that `obj`'s foreign key of the many-to-one `prop` names now."""
    return _get(prop.mapper.class_, getattr(obj, _foreign_key(prop)))


def changed_fields(obj: Any) -> dict[str, list[Any]]:
    """What an audited object's pending changes change: field → [old, new], nothing for
    values set to what they were (a CSV import's `unchanged` rows)."""
    return changes_of(obj, AUDITED[type(obj)], "dirty")


def changes_of(obj: Any, audited: Audit, state: str) -> dict[str, list[Any]]:
    """Field → [old, new] for what differs; a new object's old values and a deleted one's
    new values are null."""
    changes = {}
    for attribute in audited.fields:
        if state == "new":
            old, new = None, _new_value(obj, attribute)
        elif state == "deleted":
            old, new = getattr(obj, attribute), None
        elif (values := _values(obj, attribute)) is not None:
            old, new = values
        else:
            continue
        old, new = shown(old), shown(new)
        if old == new:
            continue
        if attribute in audited.personal:
            old = new = REDACTED
        changes[field_name(attribute)] = [old, new]
    return changes


# Pending entries -----------------------------------------------------------------------------


@dataclass
class Pending:
    """An entry to write at commit. Targets are kept as objects: a new one has no id until
    it is flushed."""

    action: str
    target_type: str
    target: Any  # the object, or its id
    location: Location | None
    actor: User | None
    changes: dict[str, list[Any]] = field(default_factory=dict)

    def merge(self, changes: dict[str, list[Any]]) -> None:
        """Later changes of the same target in the same transaction: first old, last new."""
        for name, (old, new) in changes.items():
            first = self.changes.get(name, [old, new])[0]
            if first == new and first != REDACTED:
                self.changes.pop(name, None)
            else:
                self.changes[name] = [first, new]


@dataclass
class Transaction:
    """What one transaction has to record so far."""

    pending: dict[Any, Pending] = field(default_factory=dict)
    # Accounts signing in: their sign-in bookkeeping (a password rehash) is no entry.
    signing_in: set[uuid.UUID] = field(default_factory=set)
    # (user id, role, location id) of offers accepted in this transaction.
    accepted: set[tuple[Any, str, Any]] = field(default_factory=set)


def _transaction(session: Session) -> Transaction:
    if "audit" not in session.info:
        session.info["audit"] = Transaction()
    return session.info["audit"]


def acting_user() -> User | None:
    """The signed-in user, if any: who is making this change."""
    if has_request_context() and current_user.is_authenticated:
        return current_user._get_current_object()
    return None


def acting_token_id(actor: User | None) -> uuid.UUID | None:
    """The id of the API token this request came with, if its user is `actor`."""
    token = g.get("api_token") if has_request_context() else None
    return (
        token.id if token is not None and actor is not None and token.user_id == actor.id else None
    )


def record(
    action: str,
    target: Any,
    actor: User | None = None,
    *,
    sign_in: bool = False,
    target_type: str = "user",
    location: Location | None = None,
) -> None:
    """An entry for an event that changes no audited field (sign-in, failed sign-in,
    sign-out; a held message released or discarded), written with the transaction's next
    commit. `target` is a user by default, else an object or id of `target_type`. With
    `sign_in`, what signing in changes of the account (a password rehash) is part of this
    event, not an entry."""
    transaction = _transaction(db.session())
    if sign_in and target is not None:
        transaction.signing_in.add(target.id)
        transaction.pending.pop((target, "change"), None)
    # An unknown address's failed sign-in targets no user: {"type": "user", "id": null}.
    transaction.pending[object()] = Pending(action, target_type, target, location, actor)


# The session events ----------------------------------------------------------------------------


def _role_entry(
    transaction: Transaction,
    actor: User,
    user_id: uuid.UUID,
    role: str,
    location: Location | None,
    verb: str,
    changes: dict[str, list[Any]],
) -> None:
    """One entry per user, role and place in a transaction; a role an accepted offer gives
    is its acceptance."""
    place = location.id if location is not None else None
    if verb == "grant" and (user_id, role, place) in transaction.accepted:
        verb = "accept"
    key = ("role", user_id, role, place)
    entry = transaction.pending.get(key)
    if entry is None:
        transaction.pending[key] = Pending(
            f"{role}.{verb}", "user", user_id, location, actor, changes=changes
        )
    else:
        entry.merge(changes)
        entry.action = f"{role}.{verb}"


def _roles(transaction: Transaction, actor: User, obj: Any, state: str) -> None:
    """Entries for the rows that hold roles: memberships, the super flag, offers."""
    if isinstance(obj, RoleGrant):
        role = obj.role.value
        location = _get(Location, obj.location_id)
        if state == "new":
            offer = {"pending": [None, role]}
            _role_entry(transaction, actor, obj.user_id, role, location, "grant", offer)
        elif state == "dirty" and inspect(obj).attrs.used_at.history.added:
            # Accepted: an entry even when the user held the role already.
            transaction.accepted.add((obj.user_id, role, obj.location_id))
            _role_entry(transaction, actor, obj.user_id, role, location, "accept", {})
        elif state == "deleted":  # withdrawn (replaced and spent offers go in bulk)
            withdrawn = {"pending": [role, None]}
            _role_entry(transaction, actor, obj.user_id, role, location, "withdraw", withdrawn)
    elif isinstance(obj, Membership):
        location = obj.location if obj.location is not None else _get(Location, obj.location_id)
        if state == "deleted":
            role = obj.role.value
            removed = {"role": [role, None]}
            _role_entry(transaction, actor, obj.user_id, role, location, "remove", removed)
            return
        values = (None, obj.role) if state == "new" else _values(obj, "role")
        if values is not None:
            old, new = values
            given = {"role": [shown(old), new.value]}
            _role_entry(transaction, actor, obj.user_id, new.value, location, "grant", given)
    elif isinstance(obj, User) and (values := _values(obj, "is_super")) is not None:
        verb, change = ("grant", [None, "super"]) if values[1] else ("remove", ["super", None])
        _role_entry(transaction, actor, obj.id, "super", None, verb, {"role": change})


STATE_VERBS = {"new": "create", "dirty": "update", "deleted": "delete"}


def dirty_action(audited: Audit, changes: dict[str, list[Any]]) -> str | None:
    """What a change names itself, when not "update": a part's own action (set, changed
    or cleared), else the verb of a telling field."""
    for attribute, part in audited.parts:
        if (values := changes.get(field_name(attribute))) is not None:
            old, new = values
            verb = "create" if old is None else "delete" if new is None else "update"
            return f"{part}.{verb}"
    verb = next((v for f, v in audited.verbs if field_name(f) in changes), None)
    return verb and f"{audited.type}.{verb}"


def _collect(session: Session, _context: Any, _instances: Any) -> None:
    if not has_request_context():
        return
    states = {"new": session.new, "dirty": session.dirty, "deleted": session.deleted}
    objects = [
        (obj, state)
        for state, objs in states.items()
        for obj in objs
        if type(obj) in AUDITED or isinstance(obj, (Membership, RoleGrant))
    ]
    if not objects:
        return
    transaction = _transaction(session)
    actor = acting_user()
    # Offers first: an accepted offer names the role the same flush gives.
    objects.sort(key=lambda item: not isinstance(item[0], RoleGrant))
    for obj, state in objects:
        if type(obj) is User:
            # A new account is recorded by the role it is invited to (its grant).
            if state == "dirty":
                if actor is not None:
                    _roles(transaction, actor, obj, state)
                _account(transaction, obj, actor)
            continue
        if actor is None:
            continue  # the public's writes (votes, receipts) are not privileged
        _roles(transaction, actor, obj, state)
        audited = AUDITED.get(type(obj))
        if audited is None:
            continue
        changes = changes_of(obj, audited, state)
        if state == "dirty" and not changes:
            continue
        action = f"{audited.type}.{STATE_VERBS[state]}"
        if state == "dirty":
            action = dirty_action(audited, changes) or action
        key = (obj, "change")
        if key in transaction.pending:
            transaction.pending[key].merge(changes)
            if state == "deleted":
                transaction.pending[key].action = f"{audited.type}.delete"
            continue
        location = entry_location(obj, audited) or path_location()
        transaction.pending[key] = Pending(action, audited.type, obj, location, actor, changes)


def _account(transaction: Transaction, user: User, actor: User | None) -> None:
    """One entry for changes to an account's own fields, named by the most telling.

    A password or an address only its owner changes (with the current password or a mailed
    link): the account is the actor, whoever else is signed in. Name and phone: whoever
    changed them (the account itself, through a link, when nobody is signed in). These
    entries belong to no location: a user's details are the supers' to see.
    """
    if user.id in transaction.signing_in:
        return
    changes = changes_of(user, AUDITED[User], "dirty")
    if not changes:
        return
    key = (user, "change")
    entry = transaction.pending.get(key)
    if entry is not None:
        entry.merge(changes)
        changes = entry.changes
    action = next(
        (f"user.{verb}" for attribute, verb in USER_ACTIONS if field_name(attribute) in changes),
        "user.update",
    )
    who = actor if action == "user.update" and actor is not None else user
    if entry is None:
        transaction.pending[key] = Pending(action, "user", user, None, who, changes)
    else:
        entry.action, entry.actor = action, who


def _client_ip() -> str | None:
    """The client's address (after PROXY_FIX_X_FOR), if it is one; without an IPv6 zone
    (`%eth0`), which only names an interface of the host that saw it."""
    try:
        return str(ipaddress.ip_address((request.remote_addr or "").split("%", 1)[0]))
    except ValueError:
        return None


def _write(session: Session) -> None:
    if not has_request_context() and "audit" not in session.info:
        return
    if session.in_nested_transaction():
        return  # a savepoint: the entries go with the transaction's own commit
    session.flush()  # what is still unflushed is collected too (the commit would flush it)
    transaction = session.info.get("audit")
    if transaction is None or not transaction.pending:
        return
    request_id = g.get("request_id") if has_request_context() else None
    ip = _client_ip() if has_request_context() else None
    rows = [
        entry_row(entry, request_id, ip)
        for entry in transaction.pending.values()
        if not (entry.action.endswith(".update") and not entry.changes)  # changed back
    ]
    del session.info["audit"]
    if len(rows) == 1:
        # One row: one INSERT either way, and without RETURNING it may travel with the
        # commit (platform/with_commit.py: a sign-in's).
        session.execute(insert(AuditEntry), rows[0])
    elif rows:
        # Inserted as rows, not objects the session would track and flush one by one: an
        # import of 10,000 listings writes its 10,000 entries in a few statements. RETURNING
        # makes SQLAlchemy batch them as multi-row INSERTs on psycopg too (without it, one
        # INSERT per row: PostgreSQL's statement-level count trigger would fire per entry).
        session.execute(insert(AuditEntry).returning(AuditEntry.id), rows)


def entry_row(entry: Pending, request_id: str | None, ip: str | None) -> dict[str, Any]:
    """The `audit_entries` row of a pending entry."""
    target, location, actor = entry.target, entry.location, entry.actor
    return {
        "action": entry.action,
        "actor_id": actor.id if actor is not None else None,
        "actor_email": actor.email if actor is not None else None,
        "actor_token_id": acting_token_id(actor),
        "target_type": entry.target_type,
        "target_id": target if isinstance(target, uuid.UUID) else getattr(target, "id", None),
        "target_slug": getattr(target, "slug", None),
        "location_id": location.id if location is not None else None,
        "location_slug": location.slug if location is not None else None,
        "changes": entry.changes,
        "request_id": request_id,
        "ip": ip,
    }


def _forget(session: Session, transaction: SessionTransaction) -> None:
    """A transaction that ended without writing its entries (rolled back, closed) takes
    them along."""
    if transaction.parent is None:
        session.info.pop("audit", None)


def entries_counted(location_id: uuid.UUID | None = None) -> int:
    """How many audit entries there are (at `location_id`, when given): the sum of their
    kept counts (models/audit.py), exact whatever the table's size."""
    stmt = select(func.coalesce(func.sum(AuditCount.entries), 0))
    if location_id is not None:
        stmt = stmt.where(AuditCount.location_id == location_id)
    return int(db.session.scalar(stmt))


def compact_counts() -> int:
    """Fold the rows of `audit_counts` into one per location (none where it comes to 0),
    committed; how many rows there were. The rows taken are exactly the rows summed (one
    DELETE … RETURNING), so rows added meanwhile are neither lost nor counted twice."""
    taken = db.session.execute(
        delete(AuditCount)
        .returning(AuditCount.location_id, AuditCount.entries)
        .execution_options(synchronize_session=False)
    ).all()
    sums: Counter = Counter()
    for location_id, entries in taken:
        sums[location_id] += entries
    folded = [{"location_id": key, "entries": n} for key, n in sums.items() if n]
    if folded:
        db.session.execute(insert(AuditCount), folded)
    db.session.commit()
    return len(taken)


# Registered by create_app (events.py).
LISTENERS = (
    (Session, "before_flush", _collect, {}),
    (Session, "before_commit", _write, {}),
    (Session, "after_transaction_end", _forget, {}),
)
