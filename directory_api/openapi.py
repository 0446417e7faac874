"""The OpenAPI 3.1 document, generated from the routes and the marshmallow schemas they use.

Each view declares its body, response and query schemas with `@spec` (the same classes it
validates and dumps with); the access decorators record the role they enforce. The
document is built by walking the app's URL map, so every route is in it.
"""

from collections.abc import Callable
from functools import cache
from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Flask
from marshmallow import Schema, fields
from werkzeug.routing import AnyConverter, Rule, UUIDConverter

from .schemas.base import SLUG_PATTERN, SlugConverter

VERSION = "1.0.0"
ROLE_TEXT = {
    "login": "Signed in (any user).",
    "super": "A super.",
    "owner": "An owner of the location in the path, or a super.",
    "access": "An owner or admin of the location in the path, or a super.",
}
# Problem responses every operation can produce, and those that depend on what it takes.
ALWAYS = {
    500: "Unexpected error (logged with the request id).",
    503: "The database or another required service is unavailable.",
}
WITH_BODY = {
    400: "The body is not valid JSON.",
    413: "The body is too large.",
    415: "The body is not application/json.",
    422: "Invalid fields (see `errors`).",
}
WITH_QUERY = {422: "Invalid query parameters (see `errors`)."}
PROTECTED = {401: "Not signed in.", 403: "Signed in without the role, or a cross-site request."}
UNSAFE = {403: "A cross-site request (foreign Origin) is refused."}


class ProblemSchema(Schema):
    type = fields.String(required=True)
    title = fields.String(required=True)
    status = fields.Integer(required=True)
    detail = fields.String()
    errors = fields.Dict(metadata={"description": "Field name → list of messages."})


def spec(
    *,
    body: type[Schema] | None = None,
    response: type[Schema] | None = None,
    status: int = 200,
    query: type[Schema] | None = None,
    paged: bool = False,
    responses: dict[int, type[Schema] | None] | None = None,
    conflicts: bool = False,
    rate_limited: bool = False,
    not_found: bool = False,
    failures: dict[int, str] | None = None,
) -> Callable[[Callable], Callable]:
    """Describe a view for the OpenAPI document.

    `response` with `status` is the success answer (`paged` wraps it in a page); `responses`
    adds more (status → schema or None). `conflicts`: may answer 409; `rate_limited`: 429;
    `not_found`: 404 beyond what its path parameters imply (a target named in the body);
    `failures`: other problem answers (status → description).
    """

    def decorator(view: Callable) -> Callable:
        view.openapi = {  # type: ignore[attr-defined]
            "body": body,
            "response": response,
            "status": status,
            "query": query,
            "paged": paged,
            "responses": responses or {},
            "conflicts": conflicts,
            "rate_limited": rate_limited,
            "not_found": not_found,
            "failures": failures or {},
        }
        return view

    return decorator


@cache
def page_schema(item: type[Schema]) -> type[Schema]:
    name = item.__name__.removesuffix("Schema") + "Page"
    return type(
        name,
        (Schema,),
        {
            "items": fields.List(fields.Nested(item), required=True),
            "page": fields.Integer(required=True),
            "per_page": fields.Integer(required=True, data_key="perPage"),
            "total": fields.Integer(required=True),
            "Meta": type("Meta", (), {"register": False}),
        },
    )


def path_parameter(name: str, converter: Any) -> dict[str, Any]:
    if isinstance(converter, UUIDConverter):
        schema: dict[str, Any] = {"type": "string", "format": "uuid"}
    elif isinstance(converter, SlugConverter):
        schema = {"type": "string", "pattern": SLUG_PATTERN, "maxLength": 100}
    elif isinstance(converter, AnyConverter):
        schema = {"type": "string", "enum": sorted(converter.items)}
    else:
        schema = {"type": "string", "minLength": 1}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def openapi_path(rule: Rule) -> str:
    path = rule.rule
    for name, converter in rule._converters.items():
        for prefix in (f"<{name}>", f"<{type(converter).__name__}:{name}>"):
            path = path.replace(prefix, f"{{{name}}}")
    # Converters written with arguments, e.g. <any(a, b):name> or <slug:name>.
    while "<" in path:
        start, end = path.index("<"), path.index(">")
        path = path[:start] + "{" + path[start + 1 : end].split(":")[-1] + "}" + path[end + 1 :]
    return path


def problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": "Problem"}},
    }


def operation(view: Callable, method: str, rule: Rule) -> dict[str, Any]:
    info = getattr(view, "openapi", None)
    if info is None:
        raise LookupError(f"{rule.endpoint} ({method} {rule.rule}) has no @spec")
    doc = (view.__doc__ or "").strip().splitlines()
    access = getattr(view, "access", None)
    op: dict[str, Any] = {
        "operationId": rule.endpoint.replace(".", "_"),
        "summary": doc[0] if doc else rule.endpoint,
        "tags": [rule.endpoint.split(".")[0]],
        "responses": {},
    }
    if access:
        op["description"] = "Requires: " + ROLE_TEXT[access]
        op["x-required-role"] = access
        op["security"] = [{"cookieAuth": []}]
    if info["query"] is not None:
        op["parameters"] = [{"in": "query", "schema": info["query"]}]
    if info["body"] is not None:
        content = {"application/json": {"schema": info["body"]}}
        if getattr(view, "accepts_forms", False):
            for media in ("application/x-www-form-urlencoded", "multipart/form-data"):
                content[media] = {"schema": info["body"]}
        op["requestBody"] = {"required": True, "content": content}

    success = {info["status"]: info["response"], **info["responses"]}
    for status, schema in success.items():
        if status == 204:
            op["responses"][str(status)] = {"description": "Done; no content."}
            continue
        if schema is None:
            op["responses"][str(status)] = {"description": "Success."}
            continue
        shown = page_schema(schema) if info["paged"] and status == info["status"] else schema
        op["responses"][str(status)] = {
            "description": "Success.",
            "content": {"application/json": {"schema": shown}},
        }

    errors = dict(ALWAYS)
    if info["body"] is not None:
        errors |= WITH_BODY
    if info["query"] is not None:
        errors |= WITH_QUERY
    if method not in ("GET", "HEAD"):
        errors |= UNSAFE
        errors.setdefault(415, "A body that is not application/json.")
    if access:
        errors |= PROTECTED
    if rule.arguments or info["not_found"]:
        errors[404] = "No such resource (or not visible to you)."
    if info["conflicts"]:
        errors[409] = "Conflicts with existing data (taken slug or e-mail, still in use …)."
    if info["rate_limited"]:
        errors[429] = "Rate limited; see Retry-After."
    errors |= info["failures"]
    for status, description in sorted(errors.items()):
        op["responses"].setdefault(str(status), problem(description))
    return op


def build_openapi(app: Flask) -> dict[str, Any]:
    document = APISpec(
        title="Directory API",
        version=VERSION,
        openapi_version="3.1.0",
        plugins=[MarshmallowPlugin()],
        info={
            "description": "Regions, categories, socials, locations, businesses, employers, "
            "accounts and votes. Errors are RFC 9457 problem details."
        },
    )
    document.components.schema("Problem", schema=ProblemSchema)
    document.components.security_scheme(
        "cookieAuth",
        {
            "type": "apiKey",
            "in": "cookie",
            "name": app.config["SESSION_COOKIE_NAME"],
            "description": "The session cookie set by POST /auth/login.",
        },
    )
    paths: dict[str, dict[str, Any]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        view = app.view_functions[rule.endpoint]
        path = openapi_path(rule)
        entry = paths.setdefault(path, {"operations": {}, "parameters": []})
        entry["parameters"] = [path_parameter(n, c) for n, c in rule._converters.items()]
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            entry["operations"][method.lower()] = operation(view, method, rule)
    for path, entry in paths.items():
        document.path(path=path, operations=entry["operations"], parameters=entry["parameters"])
    return document.to_dict()
