"""/regions and /socials: two reference lists whose reads are the same, one piece of code.

`reference_blueprint` makes a list's blueprint with its reads (GET /, GET /slug/:slug and
GET /id/:id) and its creation by a super (POST /); each module adds its changes and
deletions (regions name their target in the path, socials in the body).
"""

import uuid
from typing import Any

from flask import Blueprint
from marshmallow import Schema

from ..endpoints import Access, endpoint
from ..models.api_token import Scope
from ..platform.output import schema_instance
from ..platform.page_queries import small_page
from ..platform.pagination import ListArgs, sort_fields
from .changes import create_named
from .lookups import get_or_404, named_by_path


def reference_blueprint(
    model: Any, body: type[Schema], out: type[Schema], plural: str, noun: str
) -> Blueprint:
    """The blueprint of `model`'s list at /`plural`: its reads, and creation from `body`;
    `noun` names one item."""
    bp = Blueprint(plural, __name__, url_prefix=f"/{plural}")
    list_args = ListArgs.sorted_by(sort_fields(model), default="name")

    @bp.get("/", endpoint="list")
    @endpoint(response=out, query=list_args, paged=True)
    def list_items(args):
        return small_page(model, args, schema_instance(out))

    @bp.get("/slug/<slug:item_slug>", endpoint="get_by_slug")
    @bp.get("/id/<uuid:item_id>", endpoint="get_by_id")
    @endpoint(response=out)
    def get_item(item_slug: str | None = None, item_id: uuid.UUID | None = None):
        return get_or_404(model, named_by_path(model, item_slug, item_id), what=noun)

    @bp.post("/")
    @endpoint(
        body, out, status=201, access=Access.SUPER, scope=Scope.DIRECTORY_WRITE, conflicts=True
    )
    def create_item(data):
        return create_named(model, data)

    list_items.__doc__ = f"List every {noun} (paged, sortable)."
    create_item.__doc__ = f"Create a {noun} (its slug derived from the name when absent)."
    get_item.__doc__ = f"Get one {noun} by slug or by id."
    return bp
