"""What other origins may send and read (flask-cors): the frontend's origins, with cookies
(CORS_ORIGINS, in create_app), and any page for the public forms, without (`cross_site`
endpoints; protection.open_public_forms)."""

EXPOSED_HEADERS = [
    "ETag",
    "Link",
    "Location",
    "Retry-After",
    "X-Request-ID",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "WWW-Authenticate",
]
ALLOWED_HEADERS = ["Content-Type", "X-Request-ID", "Idempotency-Key"]
# The frontend's origins may also send a bearer token (a public form's page never needs one).
FRONTEND_HEADERS = [*ALLOWED_HEADERS, "Authorization"]
MAX_AGE = 600  # seconds a browser may keep a preflight's answer


# The public forms (`cross_site` endpoints), for a page on any other site: "*", no cookie.
PUBLIC_FORMS = {
    "origins": "*",
    "send_wildcard": True,  # "*": the answer is the same for every page
    "supports_credentials": False,
    "methods": ["GET", "POST"],  # a challenge (GET), a submission (POST)
    "allow_headers": ALLOWED_HEADERS,
    "expose_headers": EXPOSED_HEADERS,
    "max_age": MAX_AGE,
}
