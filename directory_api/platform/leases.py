"""Work that a worker takes for a while: the next due row of a queue, claimed by a lease.

A queue is a table with `status`, `attempts` and `next_attempt_at`: a row is due when it
is pending and its next attempt has come. `claim_next` takes one due row with an atomic
update that counts the attempt and moves `next_attempt_at` a lease ahead (on PostgreSQL
skipping rows other workers are taking, so workers do not queue behind one another), and
commits: the row comes detached, and no lock nor transaction is held while the work is
done. A row whose worker died is due again once the lease runs out. `settle` records the
outcome only while the claim is still the worker's own (its attempt is the row's last), so
a worker that lost its lease changes nothing.

The outbox's mail and the webhook deliveries are both such queues.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, select, update

from .extensions import db
from .types import utcnow

log = logging.getLogger(__name__)
Row = TypeVar("Row")


@dataclass
class Claim(Generic[Row]):
    row: Row
    attempt: int
    deadline: float  # time.monotonic() by which the work must be over


def work_time(lease: timedelta) -> float:
    """Seconds a claim's work may take: its lease less a tenth of it (a second at least),
    so the work is over before anyone else may take the row."""
    seconds = lease.total_seconds()
    return seconds - max(seconds / 10, 1.0)


def claim_next(
    model: type[Row], pending: Any, lease: timedelta, *criteria: ColumnElement[bool]
) -> Claim[Row] | None:
    """Take the next due row of `model` (status `pending`, and `criteria`) for this worker,
    or None when nothing is due: one UPDATE … RETURNING of the row its subquery picks (on
    PostgreSQL `FOR UPDATE SKIP LOCKED`: a row another worker is taking is passed over).
    One statement, so SQLite's writers never meet holding a read they must upgrade."""
    now = utcnow()
    table: Any = model
    due = (
        select(table.id)
        .where(table.status == pending, table.next_attempt_at <= now, *criteria)
        .order_by(table.next_attempt_at, table.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    taken: Any = db.session.scalars(
        update(model)
        .where(table.id == due)
        .values(attempts=table.attempts + 1, next_attempt_at=now + lease)
        .returning(model),
        execution_options={"synchronize_session": False, "populate_existing": True},
    ).first()
    if taken is None:
        db.session.commit()
        return None
    # Let go of it: no transaction stays open (nor a pooled connection held) while the
    # work talks to another server.
    db.session.expunge(taken)
    db.session.commit()
    return Claim(taken, taken.attempts, time.monotonic() + work_time(lease))


def settle(
    claim: Claim[Any], pending: Any, then: Callable[[], None] | None = None, **values: Any
) -> bool:
    """Record the outcome, only while the claim is still ours (nobody re-claimed it), with
    what `then` does in the same transaction (only if it was recorded), and commit;
    whether it was recorded."""
    row = claim.row
    model: Any = type(row)
    settled = db.session.execute(
        update(model)
        .where(
            model.id == row.id,
            model.status == pending,
            model.attempts == claim.attempt,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    ).rowcount
    if settled == 1 and then is not None:
        then()
    db.session.commit()
    if settled != 1:
        log.warning("%s %s: claim lost before its outcome was recorded", model.__name__, row.id)
    return settled == 1
