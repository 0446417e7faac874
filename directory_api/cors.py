"""What other origins may send and read (flask-cors): the frontend's origins, with cookies
(CORS_ORIGINS, in create_app), and any page for the public forms, without (`cross_site`
endpoints)."""

from collections.abc import Callable
from typing import Any

from flask_cors import cross_origin

EXPOSED_HEADERS = [
    "ETag",
    "Link",
    "Location",
    "Retry-After",
    "X-Request-ID",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
]
ALLOWED_HEADERS = ["Content-Type", "X-Request-ID", "Idempotency-Key"]
MAX_AGE = 600  # seconds a browser may keep a preflight's answer


def from_any_page(view: Callable[..., Any]) -> Callable[..., Any]:
    """`view` posted to from any origin, whose answer the page may read; no cookie goes
    along (a public form)."""
    return cross_origin(
        origins="*",
        send_wildcard=True,  # "*": the answer is the same for every page
        supports_credentials=False,
        methods=["POST"],
        allow_headers=ALLOWED_HEADERS,
        expose_headers=EXPOSED_HEADERS,
        max_age=MAX_AGE,
    )(view)
