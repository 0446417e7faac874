"""The OpenAPI 3.1 document, generated from the routes and the marshmallow schemas they use.

Each view's `@endpoint` declaration (endpoints.py) names the schemas it validates and dumps
with, the access it enforces, its limits and whether it takes `Idempotency-Key`; the
document is built from those declarations by walking the app's URL map, so every route is
in it. Field constraints come from the marshmallow fields themselves.
"""

import configparser
import copy
import re
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Flask
from marshmallow import INCLUDE, Schema, fields
from werkzeug.routing import AnyConverter, Rule, UUIDConverter

from .endpoints import declaration_of
from .platform.csv_export import columns
from .platform.idempotency import HEADER_PARAMETER
from .platform.slugs import SlugConverter
from .schemas.base import TargetSchema


def package_version() -> str:
    """The one version number: setup.cfg's, in a checkout (so a bump shows without a
    reinstall), else the installed package's. `GET /` and the document say it;
    CHANGELOG.md has an entry for it (tests/test_openapi.py)."""
    checkout = Path(__file__).resolve().parent.parent / "setup.cfg"
    if checkout.is_file():
        parser = configparser.ConfigParser()
        parser.read(checkout)
        return parser["metadata"]["version"]
    return metadata.version("directory-api")


VERSION = package_version()
ROLE_TEXT = {
    "login": "Signed in (any user).",
    "super": "A super.",
    "owner": "An owner of the location in the path, or a super.",
    "access": "An owner or admin of the location in the path, or a super.",
}
# Problem responses every operation can produce, and those that depend on what it takes.
ALWAYS = {
    # nginx in front answers these itself, as problems (deploy/nginx.conf). It never sends
    # a 408: a client that stops talking is disconnected.
    414: "The request line (the path with its query) is too long.",
    431: "A header field, or the request's head as a whole, is too large.",
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
PUBLIC_VIEW_TEXT = (
    "Public. Signed in with access to the location (its owners and admins, supers), the "
    "answer shows more: the fields marked staff-only are present only then."
)
FORMS_TEXT = (
    "JSON, or the same fields as a form: `application/x-www-form-urlencoded` (as documented) "
    "or `multipart/form-data`."
)


class ProblemSchema(Schema):
    type = fields.String(required=True)
    title = fields.String(required=True)
    status = fields.Integer(required=True)
    detail = fields.String()
    errors = fields.Dict(metadata={"description": "Field name → list of messages."})
    # Extension members (RFC 9457 allows any; these are the ones the API sends).
    request_id = fields.String(
        data_key="requestId", metadata={"description": "500: the id the error is logged with."}
    )
    used_by = fields.Dict(
        data_key="usedBy",
        keys=fields.String(),
        values=fields.Integer(),
        metadata={"description": "409 on delete: what still uses the resource, with counts."},
    )
    refused_fields = fields.List(
        fields.String(),
        data_key="fields",
        metadata={"description": "403: the fields the caller may not change."},
    )

    class Meta:
        unknown = INCLUDE  # documented as open: clients must ignore members they do not know


def text_constraints(self: Any, field: fields.Field, **kwargs: Any) -> dict[str, Any]:
    """JSON Schema for the API's own fields (an apispec attribute function): the keywords a
    field states about itself (`json_schema`: Text and its kinds, Password)."""
    json_schema = getattr(field, "json_schema", None)
    return json_schema() if json_schema is not None else {}


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
        schema = dict(converter.json_schema)
    elif isinstance(converter, AnyConverter):
        schema = {"type": "string", "enum": sorted(converter.items)}
    else:
        schema = {"type": "string", "minLength": 1}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _template(rule: Rule) -> str:
    path = rule.rule
    for name, converter in rule._converters.items():
        for prefix in (f"<{name}>", f"<{type(converter).__name__}:{name}>"):
            path = path.replace(prefix, f"{{{name}}}")
    # Converters written with arguments, e.g. <any(a, b):name> or <slug:name>.
    while "<" in path:
        start, end = path.index("<"), path.index(">")
        path = path[:start] + "{" + path[start + 1 : end].split(":")[-1] + "}" + path[end + 1 :]
    return path


def _shape(template: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", template)


def openapi_path(rule: Rule) -> str:
    """The rule's path template. OpenAPI treats templates that differ only in their
    parameter names as one path (which must then be written once), so routes such as
    /locations/slug/<item_slug> (GET) and /locations/slug/<slug> (PUT) share the names
    that most of that path's operations use."""
    template = _template(rule)
    if rule.map is None:
        return template
    votes: dict[str, int] = {}
    for other in rule.map.iter_rules():
        candidate = _template(other)
        if _shape(candidate) == _shape(template):
            methods = (other.methods or set()) - {"HEAD", "OPTIONS"}
            votes[candidate] = votes.get(candidate, 0) + len(methods)
    return min(votes, key=lambda candidate: (-votes[candidate], candidate))


def _rename_path_arguments(rule: Rule, path: str) -> dict[str, str]:
    """Rule argument name → the name `path` gives it (they differ on a merged path)."""
    ours = re.findall(r"\{([^}]*)\}", _template(rule))
    theirs = re.findall(r"\{([^}]*)\}", path)
    return dict(zip(ours, theirs, strict=True))


def problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": "Problem"}},
    }


def csv_answer(schema: type[Schema]) -> dict[str, Any]:
    names = ", ".join(f"`{name}`" for name in columns(schema()))
    return {
        "description": (
            f"Every matching row as CSV: a header row ({names}), then one row per item as the "
            "JSON list shows it (lists as space-separated `a:b` pairs; a cell starting with "
            "=, +, - or @ is prefixed with ')."
        ),
        "content": {"text/csv": {"schema": {"type": "string"}}},
    }


def csv_body(rows: type[Schema]) -> dict[str, Any]:
    names = ", ".join(f"`{name}`" for name in columns(rows(), load=True))
    return {
        "required": True,
        "description": (
            f"CSV with a header row naming the columns ({names}; `id`, `createdAt` and "
            "`updatedAt` are accepted and ignored, so an export imports as it is), then one "
            "row per item, its cells as the JSON body would carry them (lists as "
            "space-separated `a:b` pairs; a leading ' before =, +, - or @ is removed). A row "
            "whose `slug` names an existing item updates the columns present; any other row "
            "creates one."
        ),
        "content": {"text/csv": {"schema": {"type": "string"}}},
    }


@cache
def form_schema(body: type[Schema]) -> type[Schema]:
    """`body` under a name of its own for form fields: a generated client tells the media
    types apart by their schemas (one schema under several would send all of them)."""
    meta = type("Meta", (getattr(body, "Meta", object),), {"register": False})
    return type(body.__name__ + "Form", (body,), {"Meta": meta})


def operation(
    view: Callable, method: str, rule: Rule, outputs: dict[type[Schema], set[str]]
) -> dict[str, Any]:
    """The operation object of `method` on `rule`. The output schemas it answers with go into
    `outputs` (schema → the names of fields it does not always show)."""
    declared = declaration_of(view)
    if declared is None:
        raise LookupError(f"{rule.endpoint} ({method} {rule.rule}) is not declared with @endpoint")
    doc = (view.__doc__ or "").strip().splitlines()
    op: dict[str, Any] = {
        "operationId": rule.endpoint.replace(".", "_"),
        "summary": doc[0] if doc else rule.endpoint,
        "tags": [rule.endpoint.split(".")[0]],
        "responses": {},
    }
    if declared.access:
        op["description"] = "Requires: " + ROLE_TEXT[declared.access]
        op["x-required-role"] = str(declared.access)
        op["security"] = [{"cookieAuth": []}]
        if declared.tokens:  # a token with the scope (role names, as OpenAPI 3.1 allows)
            scopes = [str(declared.scope)] if declared.scope else []
            op["security"].append({"bearerAuth": scopes})
            if declared.scope:
                op["x-required-scope"] = str(declared.scope)
        else:
            op["description"] += " Only by a session: no API token may call it."
    elif declared.public is not None:
        op["description"] = PUBLIC_VIEW_TEXT
        # anyone; signed in (or a token of staff), perhaps more
        op["security"] = [{}, {"cookieAuth": []}, {"bearerAuth": []}]
    else:
        op["security"] = []  # public
    parameters: list[dict[str, Any]] = []
    if declared.query is not None:
        parameters.append({"in": "query", "schema": declared.query})
    if declared.idempotent:
        parameters.append(copy.deepcopy(HEADER_PARAMETER))
    if parameters:
        op["parameters"] = parameters
    if declared.csv_body and declared.body is not None:
        op["requestBody"] = csv_body(declared.body)
    elif declared.body is not None:
        content = {"application/json": {"schema": declared.body}}
        op["requestBody"] = {"required": True, "content": content}
        if declared.forms:
            content["application/x-www-form-urlencoded"] = {"schema": form_schema(declared.body)}
            op["requestBody"]["description"] = FORMS_TEXT

    success = {declared.status: declared.response, **declared.responses}
    for status, schema in success.items():
        if status == 204:
            op["responses"][str(status)] = {"description": "Done; no content."}
            continue
        if schema is None:
            op["responses"][str(status)] = {"description": "Success."}
            continue
        if declared.csv and status == declared.status:
            op["responses"][str(status)] = csv_answer(schema)  # type: ignore[arg-type]
            continue
        shapes = schema if isinstance(schema, tuple) else (schema,)
        for shape in shapes:
            outputs.setdefault(shape, set())
        if declared.public is not None and status == declared.status:
            shown_to_all = {f.data_key or n for n, f in declared.public().fields.items()}
            for shape in shapes:
                everything = {f.data_key or n for n, f in shape().fields.items()}
                outputs[shape] |= everything - shown_to_all
        paged = declared.paged and status == declared.status
        shown: Any = page_schema(schema) if paged else schema  # type: ignore[arg-type]
        if isinstance(shown, tuple):
            shown = {"anyOf": list(shown)}
        op["responses"][str(status)] = {
            "description": "Success.",
            "content": {"application/json": {"schema": shown}},
        }

    errors = dict(ALWAYS)
    if declared.body is not None:
        errors |= WITH_BODY
    if declared.csv_body:
        errors |= {400: "The body is not UTF-8.", 415: "The body is not text/csv."}
    if declared.query is not None:
        errors |= WITH_QUERY
    if method not in ("GET", "HEAD"):
        errors |= UNSAFE
        errors.setdefault(415, "A body that is not application/json.")
    if declared.access:
        errors |= PROTECTED
    if rule.arguments or declared.not_found:
        errors[404] = "No such resource (or not visible to you)."
    if declared.conflicts:
        errors[409] = "Conflicts with existing data (taken slug or e-mail, still in use …)."
    if declared.csv:  # at_once.py's cap, besides its limit
        errors[429] = "Rate limited, or too many exports streaming at once; see Retry-After."
    elif declared.limits:
        errors[429] = "Rate limited; see Retry-After."
    errors |= declared.failures
    for status, description in sorted(errors.items()):
        op["responses"].setdefault(str(status), problem(description))
    return op


def build_openapi(app: Flask) -> dict[str, Any]:
    plugin = MarshmallowPlugin()
    document = APISpec(
        title="Directory API",
        version=VERSION,
        openapi_version="3.1.0",
        plugins=[plugin],
        info={
            "description": "Regions, categories, socials, locations, businesses, employers, "
            "accounts and votes. Errors are RFC 9457 problem details. Interactive "
            "documentation of this document: /docs.\n\n"
            "Public vote forms on any site: load the ALTCHA widget this service serves "
            '(`<script type="module" src="/docs/altcha.min.js">`), put `<altcha-widget '
            'challengeurl="/locations/{slug}/votes/challenge">` in a plain HTML form that '
            "posts to `/locations/{slug}/votes/submit/…`, and add an empty field `website` "
            "hidden from people (a honeypot); the widget adds its solution as `altcha`. "
            "A complete example: docs/examples/vote-form.html in the repository.",
            "license": {"name": "Proprietary"},
        },
        # Paths are relative to wherever the service is served.
        servers=[{"url": "/", "description": "This service."}],
    )
    assert plugin.converter is not None
    plugin.converter.add_attribute_function(text_constraints)
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
    document.components.security_scheme(
        "bearerAuth",
        {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "dapi_ + 36 base62 characters",
            "description": (
                "A personal API token (POST /me/tokens/), sent as `Authorization: Bearer "
                "dapi_…`. It acts as its user, narrowed to its scopes (`x-required-scope`) "
                "and locations."
            ),
        },
    )
    paths: dict[str, dict[str, Any]] = {}
    outputs: dict[type[Schema], set[str]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        view = app.view_functions[rule.endpoint]
        declared = declaration_of(view)  # operation() refuses a view without one
        path = openapi_path(rule)
        names = _rename_path_arguments(rule, path)
        entry = paths.setdefault(path, {"operations": {}, "parameters": []})
        if not entry["parameters"]:
            entry["parameters"] = [path_parameter(names[n], c) for n, c in rule._converters.items()]
        path_keywords = declared.path if declared else {}
        constraints = {names[name]: keywords for name, keywords in path_keywords.items()}
        for parameter in entry["parameters"]:
            parameter["schema"].update(constraints.get(parameter["name"], {}))
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            entry["operations"][method.lower()] = operation(view, method, rule, outputs)
    for path, entry in paths.items():
        document.path(path=path, operations=entry["operations"], parameters=entry["parameters"])
    result = document.to_dict()
    schemas = result["components"]["schemas"]
    names = {key[0]: name for key, name in plugin.converter.refs.items() if name in schemas}
    for schema, optional in outputs.items():
        require_shown_fields(schemas, names[schema], optional)
    for schema in schemas.values():
        # Every object says which of its fields are required, none included: a generated
        # client reads a missing `required` as "unknown", not as "none".
        if "properties" in schema:
            schema.setdefault("required", [])
    for schema, name in names.items():
        if issubclass(schema, TargetSchema):
            # The body names its target by `id` or by its current `slug` (lookups.py). Said
            # in words: as `anyOf` of two `required`, generated clients lose the body's type.
            schemas[name]["description"] = TARGET_TEXT
    return result


TARGET_TEXT = "Names its target by `id`, or by its current `slug` (one of the two is required)."


def require_shown_fields(
    schemas: dict[str, Any], name: str, optional: set[str] | frozenset[str] = frozenset()
) -> None:
    """An answer's schema lists every field it always shows as `required` (all but
    `optional`), and so do the schemas nested in it: a generated client then types them
    as present. Fields shown only to staff are described so."""
    component = schemas[name]
    properties = component.get("properties", {})
    component["required"] = [field for field in properties if field not in optional]
    for field in optional:
        properties[field]["description"] = "Staff only: present for those with access."
    for nested in _refs(properties):
        if "required" not in schemas[nested]:
            require_shown_fields(schemas, nested)


def _refs(node: Any) -> list[str]:
    """The names of the components a piece of the document refers to."""
    if isinstance(node, dict):
        found = [node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else []
        return found + [name for value in node.values() for name in _refs(value)]
    if isinstance(node, list):
        return [name for value in node for name in _refs(value)]
    return []
