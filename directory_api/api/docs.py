"""/openapi.json: the OpenAPI 3.1 document of every route, built once per process."""

from flask import Blueprint, current_app, jsonify

from ..endpoints import endpoint
from ..openapi import build_openapi

bp = Blueprint("docs", __name__)


@bp.get("/openapi.json")
@endpoint()
def openapi_document():
    """The OpenAPI 3.1 document of this API."""
    document = current_app.extensions.get("openapi_document")
    if document is None:
        document = current_app.extensions["openapi_document"] = build_openapi(current_app)
    return jsonify(document)
