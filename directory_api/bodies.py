"""Reading request bodies and query strings through marshmallow schemas."""

from collections.abc import Callable
from typing import Any, TypeVar

from flask import Request, current_app, request
from marshmallow import Schema, ValidationError

from .errors import abort


class APIRequest(Request):
    """Flask's request, with the body-decoding failures worded for this API."""

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        if e is None:
            abort(415, "The request body must be application/json.")
        abort(400, "The request body is not valid JSON.")


JSON_MIMETYPE = "application/json"
FORM_MIMETYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})

View = TypeVar("View", bound=Callable[..., Any])


def accepts_forms(view: View) -> View:
    """Mark a public endpoint that also takes HTML form bodies (the vote submission)."""
    view.accepts_forms = True  # type: ignore[attr-defined]
    return view


def endpoint_accepts_forms() -> bool:
    view = current_app.view_functions.get(request.endpoint or "")
    return bool(getattr(view, "accepts_forms", False))


def load_body(schema: Schema) -> dict[str, Any]:
    """Validate the request body: 415 for another media type, 400 for broken JSON, else 422."""
    if request.mimetype == JSON_MIMETYPE:
        data = request.get_json()  # malformed JSON raises 400
    elif request.mimetype in FORM_MIMETYPES and endpoint_accepts_forms():
        data = request.form.to_dict()
    else:
        abort(415, "The request body must be application/json.")
    if not isinstance(data, dict):
        abort(
            422,
            "The request body must be a JSON object.",
            errors={"_schema": ["Expected a JSON object."]},
        )
    try:
        return schema.load(data)
    except ValidationError as error:
        abort(422, "The request body has invalid fields.", errors=error.messages)


def load_query(schema: Schema) -> dict[str, Any]:
    """Validate the query string; a repeated or unknown parameter is an error too."""
    args: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for key, values in request.args.lists():
        if len(values) > 1:
            errors[key] = ["Give this parameter once."]
        args[key] = values[-1]
    try:
        loaded = schema.load(args)
    except ValidationError as error:
        errors.update(error.messages)  # type: ignore[arg-type]
        loaded = {}
    if errors:
        abort(422, "The query has invalid parameters.", errors=errors)
    return loaded
