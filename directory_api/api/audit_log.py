"""/audit and /locations/:slug/audit: the audit log, read-only (API.md 10).

Supers read every entry; an owner reads the entries of their location. Nothing in the API
changes or deletes an entry (only retention does, after AUDIT_RETENTION_DAYS).
"""

from typing import Any

from flask import Blueprint
from sqlalchemy import Select, select

from ..audit import entries_counted
from ..endpoints import Access, endpoint
from ..models import AuditEntry, Location
from ..models.api_token import Scope
from ..platform.extensions import db
from ..platform.page_queries import paginate
from ..schemas.audit import AuditEntryOut, AuditListArgs
from .lookups import id_by_slug

bp = Blueprint("audit", __name__)

AuditArgs = AuditListArgs.sorted_by({"at": AuditEntry.at}, default="-at")
# At one location, `location` is the path's.
LocationAuditArgs = type(
    "LocationAuditArgs",
    (AuditArgs,),
    {"Meta": type("Meta", (), {"register": False, "exclude": ("location",)})},
)


# Filters a kept count cannot answer (it is kept by location only).
COUNTED_BY_QUERY = ("actor", "action", "since", "until")


def kept_total(args: dict[str, Any], location_id: int | None = None) -> int | None:
    """The total from the kept counts (`audit_counts`) where the filters allow: a count of a
    million entries takes 200 ms, the kept one none (bench/SCALE.md). None: the page
    counts its query. `location_id` None is every location, unless `args` names one."""
    if any(name in args for name in COUNTED_BY_QUERY):
        return None
    if "location" in args:
        location_id = db.session.scalar(
            select(Location.id).where(Location.slug == args["location"])
        )
        if location_id is None:
            return 0  # no such location: no entries
    return entries_counted(location_id)


def filtered(args: dict[str, Any], *criteria: Any) -> Select:
    stmt = select(AuditEntry).where(*criteria)
    if "actor" in args:
        stmt = stmt.where(AuditEntry.actor_id == args["actor"])
    if "action" in args:
        stmt = stmt.where(AuditEntry.action == args["action"])
    if "location" in args:
        stmt = stmt.where(AuditEntry.location_id == id_by_slug(Location, args["location"]))
    if "since" in args:
        stmt = stmt.where(AuditEntry.at >= args["since"])
    if "until" in args:
        stmt = stmt.where(AuditEntry.at <= args["until"])
    return stmt


@bp.get("/audit/")
@endpoint(
    response=AuditEntryOut, query=AuditArgs, paged=True, access=Access.SUPER, scope=Scope.AUDIT_READ
)
def list_entries(args):
    """Every audit entry, newest first (filter by actor, action, location, since, until)."""
    return paginate(filtered(args), args, total=kept_total(args))


@bp.get("/locations/<slug:slug>/audit/")
@endpoint(
    response=AuditEntryOut,
    query=LocationAuditArgs,
    paged=True,
    access=Access.OWNER,
    scope=Scope.AUDIT_READ,
)
def list_location_entries(args, location: Location):
    """The audit entries of one location, newest first (its owners and supers)."""
    criterion = AuditEntry.location_id == location.id
    return paginate(filtered(args, criterion), args, total=kept_total(args, location.id))
