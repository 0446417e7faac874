"""Declare-once views: one `@endpoint(...)` says what a view takes, who may call it and what
it answers, and that one declaration both does the work and documents it (openapi.py).

    @bp.put("/slug/<slug:item_slug>")
    @endpoint(RegionUpdate, RegionOut, access=Access.SUPER, conflicts=True)
    def update_region(data, item_slug): ...

For each request, in order: 401 for an anonymous caller of a protected endpoint; the
location a `slug` path parameter names, loaded once (404), which the view receives as
`location`; 403 without the declared access; a 304 when the client holds the ETag of the
declared `revision`; for an export (`csv`), one of the process's slots for streaming (429
when none is free, at_once.py); `Idempotency-Key` (a repeat answered from its record);
the rate limits; the query string (`query`, 422) and the body (`body`: 415, 400,
422). The view gets the loaded query
and body as positional arguments, in that order, and the path parameters by name. What it
returns is dumped with `response` at `status`: an object, a `Page` (a paged list), an
`Answer` (extra headers, or a narrower schema for the public), None (204 No Content), or a
Response it built itself (a union of answers, a 503).

The declaration is kept in `DECLARATIONS`, keyed by the function the route is registered
with. `@endpoint` is the decorator right under the route's: `check_declared` refuses, at
start-up, an app with a view that has none, so nothing drops out of the document or of the
body rule silently.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import update_wrapper, wraps
from typing import Any

import orjson
from flask import Flask, Response, g, jsonify
from marshmallow import Schema

from .access import Access, check_access, check_signed_in, check_token, get_location_or_404
from .models import Location
from .models.api_token import Scope
from .platform.at_once import EXPORTS
from .platform.bodies import (
    CSV_MIMETYPE,
    FORM_MIMETYPES,
    JSON_ONLY,
    load_body,
    load_csv_text,
    load_query,
)
from .platform.caching import answer_if_known
from .platform.current import current_application, current_request
from .platform.errors import APIError
from .platform.extensions import db
from .platform.idempotency import idempotent as honour_idempotency_key
from .platform.limits import rate_limited
from .platform.output import Written, dumped, schema_instance
from .platform.pagination import Page, page_answer
from .platform.reads import read_in_transaction
from .platform.with_commit import send_with_commit


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """What a view takes, who may call it and what it answers (see the module docstring).

    `responses` adds success answers (status → schema or None); `public`: what an
    anonymous caller (or one without access) sees of `response`, where signing in shows
    more (the view answers it with `Answer(schema=…)`); `conflicts`: may answer 409;
    `not_found`: 404 beyond what its path parameters imply (a target named in the body);
    `failures`: other problem answers (status → description); `path`: JSON Schema
    keywords a path parameter has beyond what its converter implies (name → keywords).
    """

    body: type[Schema] | None = None
    response: type[Schema] | tuple[type[Schema], ...] | None = None
    status: int = 200
    query: type[Schema] | None = None
    paged: bool = False
    access: Access | None = None
    # What a token needs to call it, beside its user's role (API.md 14): every endpoint
    # with a role declares one; None for one any token may call (GET /me/). `tokens=False`:
    # no token ever may (its own kind, the password, the address, sign-out).
    scope: Scope | None = None
    tokens: bool = True
    forms: bool = False
    # Answers text/csv (a Response the view streams): `response` names its rows. It streams
    # in one of the process's EXPORTS_AT_ONCE slots (at_once.py).
    csv: bool = False
    # The body is text/csv (an import), its rows in `body`'s shape; the view gets the text.
    csv_body: bool = False

    @property
    def media_types(self) -> frozenset[str]:
        """What the body may be (the one body rule, bodies.py)."""
        if self.csv_body:
            return frozenset({CSV_MIMETYPE})
        return JSON_ONLY | FORM_MIMETYPES if self.forms else JSON_ONLY

    public: type[Schema] | None = None
    # A page on any site may post it (a public form): no cross-site refusal, CORS for any
    # origin without credentials, and the caller counts as signed out.
    cross_site: bool = False
    idempotent: bool = False
    limits: Sequence[Callable[[Callable], Callable]] = ()
    responses: Mapping[int, type[Schema] | None] = field(default_factory=dict)
    conflicts: bool = False
    not_found: bool = False
    failures: Mapping[int, str] = field(default_factory=dict)
    path: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # How the location a path names is loaded (404 when there is none): a view that needs
    # more of it loads that in the same statement (access.located).
    locate: Callable[[str], Location] = get_location_or_404
    # What determines the answer besides its URL (a stored revision), given the path's
    # location: a client holding the ETag last answered for it gets its 304, and anyone the
    # answer itself if this process kept it, before the query and body are even read
    # (caching.answer_if_known). A streamed answer's ETag is a digest of it and the URL.
    revision: Callable[[Location | None], tuple[Any, ...]] | None = None
    # For a public read with a `revision`: when this answers true (no answer could be
    # given before the work: caching.may_answer_early), the view is given the path's slug
    # as `Unlocated` instead of its location, finds the location in the statement that
    # does its work (one round trip, not two), and asks `answer_if_known` itself.
    locate_later: Callable[[], bool] | None = None
    # Its reads go before any transaction, and its writes whose results it never reads go
    # to PostgreSQL with its BEGIN in one round trip at the commit (platform/with_commit.py):
    # for views that catch no write's error at a flush.
    writes_with_commit: bool = False


@dataclass(frozen=True, slots=True)
class Unlocated:
    """The location a path names, left to the view to find (`Endpoint.locate_later`)."""

    slug: str


@dataclass
class Answer:
    """A view's answer that needs more than its body: headers (e.g. Location), or `schema`:
    a narrower view of the declared response (what the public may see), or which of the
    declared shapes this answer takes."""

    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    schema: type[Schema] | None = None
    status: int | None = None  # another of the declared statuses (`responses`)


DECLARATIONS: dict[Callable[..., Any], Endpoint] = {}


def answer(declaration: Endpoint, result: Any) -> Any:
    """The response for what a view returned (see the module docstring)."""
    if isinstance(result, Response):
        return result
    if result is None:
        return Response(status=204)
    headers: Mapping[str, str] = {}
    schema = declaration.response
    status = declaration.status
    if isinstance(result, Answer):
        headers, schema, status = result.headers, result.schema or schema, result.status or status
        result = result.body
    if isinstance(schema, tuple):
        schema = schema[0]  # one of several shapes: the first unless the view names another
    if isinstance(result, Page):
        assert isinstance(schema, type)
        return page_answer(result, dumped(result.items, schema_instance(schema, many=True)))
    if isinstance(result, Written):
        result = orjson.Fragment(result.text)
    elif isinstance(schema, type):
        result = schema_instance(schema).dump(result)
    response = jsonify(result)
    response.status_code = status
    response.headers.update(headers)
    return response


def endpoint(
    body: type[Schema] | None = None,
    response: type[Schema] | tuple[type[Schema], ...] | None = None,
    **declared: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a view: `endpoint(BodySchema, ResponseSchema, status=…, access=…, …)`."""
    declaration = Endpoint(body=body, response=response, **declared)
    if declaration.paged and declaration.query is None:
        raise TypeError("a paged endpoint declares its query (ListArgs.sorted_by(…))")
    if declaration.locate_later and (declaration.access or declaration.revision is None):
        raise TypeError("only a public read with a revision finds its location later")

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        query_schema = schema_instance(declaration.query) if declaration.query else None
        body_schema = schema_instance(declaration.body) if declaration.body else None

        def run(**path: Any) -> Any:
            loaded = []
            if query_schema is not None:
                try:
                    loaded.append(load_query(query_schema))
                except APIError:
                    location = path.get("location")
                    if isinstance(location, Unlocated):  # a path naming nothing: 404 first
                        declaration.locate(location.slug)
                    raise
            if declaration.csv_body:
                loaded.append(load_csv_text())
            elif body_schema is not None:
                loaded.append(load_body(body_schema, forms=declaration.forms))
            return answer(declaration, view(*loaded, **path))

        guarded = update_wrapper(run, view)  # the limiter keys its limits by the view's name
        for limit in reversed(declaration.limits):
            guarded = limit(guarded)
        if declaration.idempotent:
            # A repeat is answered from its record before any limit counts it: a client
            # retrying a lost answer spends nothing, and gets it even past its allowance.
            guarded = honour_idempotency_key(guarded)

        @wraps(view)
        def wrapper(**path: Any) -> Any:
            check_signed_in(declaration.access)
            if declaration.writes_with_commit:
                send_with_commit(db.session)
            later = False
            if "slug" in path:
                slug = path.pop("slug")
                later = declaration.locate_later is not None and declaration.locate_later()
                if later:
                    path["location"] = Unlocated(slug)
                else:
                    path["location"] = g.path_location = declaration.locate(slug)
            if declaration.access is not None or not declaration.tokens:
                check_token(declaration.scope, declaration.tokens, path.get("location"))
            check_access(declaration.access, path.get("location"))
            if declaration.revision is not None and not later:
                revision = declaration.revision(path.get("location"))
                known = answer_if_known(*revision, streamed=declaration.csv)
                if known is not None:
                    return known
            if declaration.csv:
                return EXPORTS.streaming(guarded, **path)
            return guarded(**path)

        if declaration.csv:
            read_in_transaction(wrapper)  # its rows stream from a server-side cursor
        if declaration.limits:
            rate_limited(wrapper)
        DECLARATIONS[wrapper] = declaration
        return wrapper

    return decorator


def declaration_of(view: Callable[..., Any] | None) -> Endpoint | None:
    return DECLARATIONS.get(view) if view is not None else None


def current_declaration() -> Endpoint | None:
    """The declaration of the endpoint the current request is routed to, if any."""
    view = current_application().view_functions.get(current_request().endpoint or "")
    return declaration_of(view)


def check_declared(app: Flask) -> None:
    """Refuse to start with a route whose view is not declared with `@endpoint`, or whose
    role is declared without the scope a token needs for it."""
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        declaration = declaration_of(app.view_functions[rule.endpoint])
        if declaration is None:
            raise LookupError(
                f"{rule.endpoint} ({rule.rule}) is not declared with @endpoint right under "
                "its route decorator"
            )
        role = declaration.access not in (None, Access.LOGIN)
        if role and declaration.tokens and declaration.scope is None:
            raise LookupError(f"{rule.endpoint} ({rule.rule}) declares a role but no scope")
