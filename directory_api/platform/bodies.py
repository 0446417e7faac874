"""Reading request bodies and query strings through marshmallow schemas."""

from typing import Any

from flask import Request, request
from marshmallow import Schema, ValidationError

from .current import current_request
from .errors import abort


class APIRequest(Request):
    """Flask's request, with the body-decoding failures worded for this API."""

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        if e is None:
            abort(415, "The request body must be application/json.")
        abort(400, "The request body is not valid JSON.")


JSON_MIMETYPE = "application/json"
CSV_MIMETYPE = "text/csv"
FORM_MIMETYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})
JSON_ONLY = frozenset({JSON_MIMETYPE})


def check_media_type(accepted: frozenset[str]) -> None:
    """The one rule on bodies: of a media type the endpoint accepts (JSON, unless it declares
    forms or CSV), else 415.

    Applied before any view to every request that carries a body (protection.py), and when
    a declared body is loaded (a request without one has no media type: 415 too).
    """
    if current_request().mimetype in accepted:
        return
    wanted = CSV_MIMETYPE if CSV_MIMETYPE in accepted else JSON_MIMETYPE
    abort(415, f"The request body must be {wanted}.")


def load_csv_text() -> str:
    """The request body as text (UTF-8, a byte-order mark tolerated): 415 unless text/csv."""
    check_media_type(frozenset({CSV_MIMETYPE}))
    try:
        return request.get_data().decode("utf-8-sig")
    except UnicodeDecodeError:
        abort(400, "The request body is not valid UTF-8.")


def load_body(schema: Schema, *, forms: bool = False) -> dict[str, Any]:
    """Validate the request body: 415 for another media type, 400 for broken JSON, else 422."""
    check_media_type(JSON_ONLY | FORM_MIMETYPES if forms else JSON_ONLY)
    # Malformed JSON raises 400.
    req = current_request()
    data = req.form.to_dict() if req.mimetype in FORM_MIMETYPES else req.get_json()
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
    for key, values in current_request().args.lists():
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
