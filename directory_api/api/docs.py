"""/, /openapi.json and /docs: what the service is, its OpenAPI 3.1 document (built once per
process), and interactive documentation of it.

The documentation is Swagger UI, served from the assets the `flask-swagger-ui` package ships
(no CDN: it works offline and behind a firewall), with this service's own page and start-up
script beside them.
"""

import hashlib
import mimetypes
from functools import cache
from pathlib import Path

import flask_swagger_ui
from flask import Blueprint, Response, current_app, jsonify, render_template

from ..endpoints import endpoint
from ..openapi import VERSION, build_openapi
from ..schemas.common import IndexOut

bp = Blueprint("docs", __name__)

# init.js (the page is a template) and the ALTCHA widget
OWN = Path(__file__).resolve().parent.parent / "docs"
SWAGGER_UI = Path(flask_swagger_ui.__file__).resolve().parent / "dist"
ASSETS = {
    "init.js": OWN,
    "swagger-ui-bundle.js": SWAGGER_UI,
    "swagger-ui.css": SWAGGER_UI,
    "favicon-32x32.png": SWAGGER_UI,
}
ASSET_NAMES = ", ".join(f"'{name}'" for name in sorted(ASSETS))
# What the page may load: its own scripts and styles (Swagger UI sets inline styles and
# inline SVG images), and the document from this service.
DOCS_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


@bp.get("/")
@endpoint(response=IndexOut)
def index():
    """What this service is, and where its documentation is."""
    return {
        "name": "Directory API",
        "version": VERSION,
        "docs": "/docs",
        "openapi": "/openapi.json",
    }


@bp.get("/openapi.json")
@endpoint()
def openapi_document():
    """The OpenAPI 3.1 document of this API."""
    document = current_app.extensions.get("openapi_document")
    if document is None:
        document = current_app.extensions["openapi_document"] = build_openapi(current_app)
    return jsonify(document)


@bp.get("/docs")
@endpoint(responses={200: None})
def docs():
    """Interactive documentation of the OpenAPI document (an HTML page)."""
    response = Response(render_template("docs.html"), mimetype="text/html")
    response.headers["Content-Security-Policy"] = DOCS_POLICY
    return response


@bp.get(f"/docs/<any({ASSET_NAMES}):name>")
@endpoint()
def docs_asset(name: str):
    """A script, style sheet or image of the documentation page."""
    return asset_response(ASSETS[name] / name)


@bp.get("/docs/altcha.min.js")
@endpoint(cross_site=True)
def altcha_widget():
    """The ALTCHA widget for public vote forms on any site (an ES module: `<script
    type="module" src="…/docs/altcha.min.js">`; version 2.3.0, MIT, pinned by
    docs/altcha.min.js.ABOUT). No CDN needed."""
    return asset_response(OWN / "altcha.min.js")


@cache
def asset(path: Path) -> tuple[bytes, str, str]:
    """A file's bytes, media type and ETag, read once per process (they change only with
    an upgrade; the biggest, Swagger UI's script, is 1.5 MB)."""
    data = path.read_bytes()
    media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return data, media_type, hashlib.sha1(data, usedforsecurity=False).hexdigest()


def asset_response(path: Path) -> Response:
    """The file as an answer, its ETag set (caching.py answers 304s and Cache-Control)."""
    data, media_type, etag = asset(path)
    response = Response(data, mimetype=media_type)
    response.set_etag(etag)
    return response
