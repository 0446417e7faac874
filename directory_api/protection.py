"""Per-request protection: request ids, cross-site refusal, JSON-only bodies, safe headers."""

import logging
import re
import uuid
from urllib.parse import urlsplit

from flask import Flask, Response, current_app, g, request
from flask_cors.core import get_cors_options, set_cors_headers

from .access import calling_token, identify_caller, note_use_once_answered
from .endpoints import current_declaration
from .platform.bodies import JSON_ONLY, check_media_type
from .platform.cors import PUBLIC_FORMS
from .platform.current import (
    current_application,
    current_globals,
    current_request,
    header_names,
)
from .platform.errors import abort

log = logging.getLogger(__name__)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def assign_request_id() -> None:
    # The environ, not request.headers, whose miss raises and catches a KeyError (current.py).
    given = current_request().environ.get("HTTP_X_REQUEST_ID", "")
    g.request_id = given if REQUEST_ID.match(given) else uuid.uuid4().hex


DEFAULT_PORTS = {"http": 80, "https": 443}


def scheme_host_port(url: str) -> tuple[str, str, int] | None:
    """What makes an origin (RFC 6454): scheme, host and port (the scheme's default port
    when none is written); None for what is not an http(s) origin."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def origin_allowed(origin: str) -> bool:
    if origin.rstrip("/") in current_app.config["CORS_ORIGINS"]:
        return True
    # The service's own origin, scheme and port included: a page over http (or on another
    # port) of the same host is another origin. The browser sets Host, so a foreign page
    # cannot forge it; behind a proxy the scheme is its X-Forwarded-Proto (PROXY_FIX_X_PROTO).
    own = scheme_host_port(request.host_url)
    return own is not None and scheme_host_port(origin) == own


def refuse_cross_site() -> None:
    """Cookies ride along on cross-site requests; refuse unsafe ones from foreign pages.

    A public form's endpoint (`cross_site`) takes them, as from someone signed out: a
    cookie that came along is not used.
    """
    req = current_request()
    if req.method in SAFE_METHODS or calling_token() is not None:
        return  # a token is never sent ambiently: a page cannot make a browser send one
    origin = req.environ.get("HTTP_ORIGIN")
    if origin is not None:
        foreign = not origin_allowed(origin)
    else:
        foreign = req.environ.get("HTTP_SEC_FETCH_SITE") == "cross-site"
    if not foreign:
        return
    declaration = current_declaration()
    if declaration is not None and declaration.cross_site:
        g._login_user = current_app.login_manager.anonymous_user()  # Flask-Login's slot
        g.session_unused = True  # nor is it kept alive (sessions.py)
        return
    if origin is not None:
        if only_the_scheme_differs(origin):
            # The operator's mistake, not an attack: say what to set, at 3 a.m. and here.
            log.warning(
                "cross-site refusal of this host's own page over another scheme: behind a "
                "proxy that terminates TLS, set PROXY_FIX_X_PROTO"
            )
        abort(403, "Cross-site request refused: this origin is not allowed.")
    abort(403, "Cross-site request refused.")


def only_the_scheme_differs(origin: str) -> bool:
    """Whether `origin` is this host over https while the request arrived over http."""
    theirs, own = scheme_host_port(origin), scheme_host_port(request.host_url)
    return (
        theirs is not None
        and own is not None
        and (theirs[0], own[0]) == ("https", "http")
        and theirs[1] == own[1]
    )


def open_public_forms(response: Response) -> Response:
    """CORS for a public form's endpoint (`cross_site`) asked by a page of another site: any
    page may send it and read every answer, errors included (which field is wrong, when to
    retry), never with a cookie. The frontend's own origins (CORS_ORIGINS) get the app-wide
    answer with credentials, which flask-cors gave before this hook runs."""
    origin = current_request().environ.get("HTTP_ORIGIN")
    if origin is None or "Access-Control-Allow-Origin" in response.headers:
        return response
    declaration = current_declaration()
    if declaration is not None and declaration.cross_site and not origin_allowed(origin):
        set_cors_headers(response, get_cors_options(current_app, PUBLIC_FORMS))
    return response


def too_long_unannounced(limit: int) -> bool:
    """Whether a body without Content-Length (chunked) runs past `limit`.

    Werkzeug reads such a body only up to the limit and quietly stops there, so the view
    would see a truncated body. Read it (cached for the view) and look for one byte more.
    """
    body = request.get_data(cache=True)
    return len(body) >= limit and bool(request.environ["wsgi.input"].read(1))


def require_json_bodies() -> None:
    """Any body must be JSON (forms or CSV only where an endpoint declares them) and within
    the size limit (an import's own, IMPORT_MAX_BYTES, for a CSV body)."""
    req = current_request()
    if req.method in SAFE_METHODS or req.routing_exception is not None:
        return  # an unknown path or method answers 404/405 whatever the body
    declaration = current_declaration()
    if declaration is not None and declaration.csv_body:
        req.max_content_length = current_application().config["IMPORT_MAX_BYTES"]
    length = req.content_length
    if not length and "chunked" not in req.headers.get("Transfer-Encoding", "").lower():
        return
    limit = req.max_content_length
    if limit and length and length > limit:
        abort(413, f"The request body is larger than {limit} bytes.")
    if limit and length is None and too_long_unannounced(limit):
        abort(413, f"The request body is larger than {limit} bytes.")
    check_media_type(declaration.media_types if declaration is not None else JSON_ONLY)


# Set on every answer; no view sets them, so they are added, not set (a set looks through
# every header already there, once per header).
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)
CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'"


def add_security_headers(response: Response) -> Response:
    headers, config = response.headers, current_application().config
    headers.add("X-Request-ID", current_globals().get("request_id") or uuid.uuid4().hex)
    headers.extend(SECURITY_HEADERS)
    max_age = config["HSTS_MAX_AGE"]
    if max_age and current_request().is_secure:  # browsers ignore it over http (RFC 6797 8.1)
        subdomains = "; includeSubDomains" if config["HSTS_INCLUDE_SUBDOMAINS"] else ""
        headers.add("Strict-Transport-Security", f"max-age={max_age}{subdomains}")
    # Nothing answered is a page to render, but the documentation, which sets its own.
    if "content-security-policy" not in header_names(headers):
        headers.add("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    return response


def register_protection(app: Flask) -> None:
    app.before_request(assign_request_id)
    app.before_request(identify_caller)  # a bearer token, before anything asks who calls
    app.before_request(refuse_cross_site)
    app.before_request(require_json_bodies)
    app.after_request(add_security_headers)
    app.after_request(note_use_once_answered)
    app.after_request(open_public_forms)
