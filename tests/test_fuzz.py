"""Fuzzing every operation of /openapi.json with Schemathesis, in-process (WSGI).

Schemathesis reads the app's own OpenAPI document, generates valid (positive) and invalid
(negative) requests for every operation and checks each answer: no 5xx, a documented
status, the documented content type, a body that matches the documented schema, valid data
accepted, invalid data refused, protected operations refusing missing or broken cookies.

Two identities: anonymous, and a super signed in through POST /auth/login (a browser on the
service's own origin, so the cross-site refusal lets its writes through). A small world with
fixed slugs and ids is seeded first; path parameters, and ids or slugs named in bodies,
often take those known values, so requests reach real rows and not only 404s. A write that
went through rebuilds the world (and signs in again) before the next example.

Bounded for the normal run, reproducible, and longer on demand:

    FUZZ_EXAMPLES=8 (default)    examples per operation and identity in the fuzzing phase
                                 (CI's PostgreSQL pass runs 25)
    FUZZ_SEED=20240601 (default) the seed; the same seed replays the same requests
    FUZZ_COVERAGE=1              add the coverage phase (a fixed ~50 boundary and invalid
                                 cases per operation); CI's PostgreSQL pass and `make fuzz`
                                 run it, `make test` leaves it out to stay quick
    make fuzz                    FUZZ_EXAMPLES=500 (FUZZ_SEED=… for another sample)

The Schemathesis pytest plugin needs the schema at import time (its fixture-based loader
does not work with pytest 9.2), so the document is read from an app without a database and
each request is sent to the test's own app.
"""

import os
import re
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from email_validator import EmailNotValidError, validate_email
from flask import Flask
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation
from schemathesis.openapi.checks import RejectedPositiveData

from directory_api import create_app
from directory_api.credentials import hash_password
from directory_api.models import (
    Business,
    Category,
    Employer,
    ListingSocial,
    Location,
    Membership,
    Region,
    Role,
    Social,
    User,
    Vote,
    VoteType,
)
from directory_api.platform.extensions import db

from .conftest import build_app, empty_all_tables
from .factories import PASSWORD

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES") or 8)
SEED = int(os.environ.get("FUZZ_SEED") or 20240601)
COVERAGE = os.environ.get("FUZZ_COVERAGE", "0") != "0"

# The requests come from a browser on the service's own origin (the test client's host).
SAME_SITE = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


def fixed(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"https://directory.test/{name}")


IDS = {
    name: fixed(name)
    for name in (
        "super",
        "owner",
        "admin",
        "invited",
        "north",
        "food",
        "cafes",
        "instagram",
        "harbour",
        "harbour-cafe",
        "acme",
        "vote-active",
        "vote-hidden",
    )
}
SUPER_EMAIL = "super@example.com"
SUPER_SESSION_TOKEN = "fuzz-super-session-token"
SESSION_COOKIE = "session"  # SESSION_COOKIE_NAME in the test configuration

# Known values for path parameters, by path prefix (longest first) and parameter name.
KNOWN_PATH_VALUES: list[tuple[str, dict[str, list[str]]]] = [
    ("/locations/{slug}/businesses/", {"item_slug": ["harbour-cafe"], "item_id": ["harbour-cafe"]}),
    ("/locations/{slug}/employers/", {"item_slug": ["acme"], "item_id": ["acme"]}),
    ("/locations/{slug}/votes/", {"vote_id": ["vote-active", "vote-hidden"]}),
    ("/locations/{slug}/owners/", {"user_id": ["owner", "super"]}),
    ("/locations/{slug}/admins/", {"user_id": ["admin", "owner"]}),
    ("/locations/", {"item_slug": ["harbour"], "item_id": ["harbour"]}),
    ("/regions/", {"item_slug": ["north"], "item_id": ["north"]}),
    ("/categories/", {"item_slug": ["food", "cafes"], "item_id": ["food", "cafes"]}),
    ("/socials/", {"item_slug": ["instagram"], "item_id": ["instagram"]}),
    ("/supers/", {"user_id": ["super", "owner"]}),
    ("/me/", {"user_id": ["super", "owner", "invited"]}),
]
# Known values for fields of positive bodies that name other rows.
KNOWN_BODY_VALUES: dict[str, list[str]] = {
    "region": ["north"],
    "parent": ["food"],
    "subcategory": ["cafes"],
    "employer": ["acme"],
    "social": ["instagram"],
}
# Bodies of PUT/DELETE on collections name their target by id (or slug).
KNOWN_BODY_TARGETS: list[tuple[str, list[str]]] = [
    ("/businesses/", ["harbour-cafe"]),
    ("/employers/", ["acme"]),
    ("/votes/", ["vote-active", "vote-hidden"]),
    ("/categories/", ["food", "cafes"]),
    ("/socials/", ["instagram"]),
]


def known_value(name: str, choices: list[str], generated: Any) -> Any:
    """A known value two times in three, else the generated one: chosen from what was
    generated, so the choice replays with the seed."""
    pick = zlib.crc32(repr((name, generated)).encode())
    if pick % 3 == 0:
        return generated
    return choices[pick % len(choices)]


def as_path_value(name: str, value: str) -> str:
    return str(IDS[value]) if name.endswith("id") else value


def steer_to_known_rows(case: schemathesis.Case) -> None:
    """Point positive path parameters and body references at the seeded world."""
    components = case.meta.components if case.meta is not None else {}

    def positive(location: ParameterLocation) -> bool:
        info = components.get(location)
        return info is None or info.mode is GenerationMode.POSITIVE

    path = case.operation.path
    if case.path_parameters and positive(ParameterLocation.PATH):
        known = {"slug": ["harbour"]}
        for prefix, names in KNOWN_PATH_VALUES:
            if path.startswith(prefix):
                known = {**known, **names}
                break
        for name, generated in list(case.path_parameters.items()):
            if name in known:
                choice = known_value(name, known[name], generated)
                if choice is not generated:
                    choice = as_path_value(name, choice)
                case.path_parameters[name] = choice
    if isinstance(case.body, dict) and positive(ParameterLocation.BODY):
        for name, choices in KNOWN_BODY_VALUES.items():
            if isinstance(case.body.get(name), str):
                case.body[name] = known_value(name, choices, case.body[name])
        for link in case.body.get("socials") or []:
            if isinstance(link, dict) and isinstance(link.get("social"), str):
                link["social"] = known_value("social", ["instagram"], link["social"])
        if case.method.upper() in ("PUT", "DELETE") and "id" in case.body:
            for suffix, targets in KNOWN_BODY_TARGETS:
                if path.endswith(suffix):
                    choice = known_value("id", targets, case.body["id"])
                    if choice is not case.body["id"]:
                        case.body["id"] = str(IDS[choice])
                    break


def seed_world() -> None:
    """The rows the fuzzer aims at, with fixed ids and slugs."""
    hashed = hash_password(PASSWORD)
    north = Region(id=IDS["north"], slug="north", name="North")
    food = Category(id=IDS["food"], slug="food", name="Food")
    cafes = Category(id=IDS["cafes"], slug="cafes", name="Cafés", parent=food)
    instagram = Social(
        id=IDS["instagram"], slug="instagram", name="Instagram", url="https://www.instagram.com"
    )
    harbour = Location(
        id=IDS["harbour"],
        slug="harbour",
        name="Harbour",
        region=north,
        directory_location=True,
        email="harbour@example.com",
    )
    cafe = Business(
        id=IDS["harbour-cafe"],
        location=harbour,
        slug="harbour-cafe",
        name="Harbour Café",
        subcategory=cafes,
        description="Coffee by the water",
    )
    cafe.socials = [ListingSocial(social=instagram, url="https://www.instagram.com/harbour")]
    acme = Employer(id=IDS["acme"], location=harbour, slug="acme", name="Acme", subcategory=cafes)
    users = [
        User(
            id=IDS["super"],
            email=SUPER_EMAIL,
            password_hash=hashed,
            is_super=True,
            session_token=SUPER_SESSION_TOKEN,
        ),
        User(id=IDS["owner"], email="owner@example.com", password_hash=hashed),
        User(id=IDS["admin"], email="admin@example.com", password_hash=hashed),
        User(id=IDS["invited"], email="invited@example.com"),
    ]
    vote_fields = {
        "location_id": IDS["harbour"],
        "type": VoteType.EMPLOYER,
        "employer": acme,
        "your_name": "Vera",
        "your_email": "vera@example.com",
        "your_phone": "+44 20 7946 0000",
        "business_name": "Acme",
        "vote_body": "Good place to work.",
        "your_position": "Barista",
    }
    db.session.add_all(
        [
            *(north, food, cafes, instagram, harbour, cafe, acme, *users),
            Vote(id=IDS["vote-active"], active=True, **vote_fields),
            Vote(id=IDS["vote-hidden"], active=False, **vote_fields),
        ]
    )
    db.session.flush()
    db.session.add_all(
        [
            Membership(user_id=IDS["owner"], location_id=IDS["harbour"], role=Role.OWNER),
            Membership(user_id=IDS["admin"], location_id=IDS["harbour"], role=Role.ADMIN),
            Membership(user_id=IDS["invited"], location_id=IDS["harbour"], role=Role.ADMIN),
        ]
    )
    db.session.commit()


class World:
    """The seeded rows and, for the super, a session; rebuilt after a request changed them."""

    def __init__(self, app: Flask, identity: str) -> None:
        self.app = app
        self.identity = identity
        self.session_id: str | None = None
        self.rebuild()

    def rebuild(self) -> None:
        with self.app.app_context():
            db.session.rollback()
            empty_all_tables(db.engine)
            seed_world()
        if self.identity == "super":
            self.session_id = self.sign_in()

    def sign_in(self) -> str:
        client = self.app.test_client()
        response = client.post(
            "/auth/login", json={"email": SUPER_EMAIL, "password": PASSWORD}, headers=SAME_SITE
        )
        assert response.status_code == 200, response.get_json()
        cookie = client.get_cookie(self.app.config["SESSION_COOKIE_NAME"])
        assert cookie is not None
        return cookie.value

    def after(self, method: str, status: int | None) -> None:
        """Rebuild before the next example (whose credentials are drawn from this world)
        if this request may have changed anything: a write that went through or failed."""
        if method.upper() not in SAFE_METHODS and (status is None or status < 400 or status >= 500):
            self.rebuild()


WORLDS: dict[str, World] = {}


class SuperSession:
    """The signed-in super's session cookie, as Schemathesis auth: it knows to leave it out
    where it tests what happens without (or with broken) credentials."""

    def get(self, case: schemathesis.Case, ctx: schemathesis.AuthContext) -> str | None:
        world = WORLDS.get("super")  # None while tests are collected
        return world.session_id if world is not None else None

    def set(self, case: schemathesis.Case, data: str, ctx: schemathesis.AuthContext) -> None:
        case.cookies = {**(case.cookies or {}), SESSION_COOKIE: data}


def fuzz_config() -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "generation": {
                "mode": "all",  # positive and negative
                "max-examples": EXAMPLES,
                # No example database: a run depends on the seed alone.
                "database": "none",
            },
            # Examples (none in the document), coverage (boundary and invalid values, a fixed
            # set per operation) and fuzzing (FUZZ_EXAMPLES per operation). Stateful testing
            # needs a state machine test of its own; the document declares no links for one.
            "phases": {"coverage": {"enabled": COVERAGE}},
            # Every check Schemathesis has, none switched off: not_a_server_error,
            # status_code_conformance, content_type_conformance, response_headers_conformance,
            # response_schema_conformance, negative_data_rejection, positive_data_acceptance,
            # missing_required_header, unsupported_method, allow_header_conformance and
            # ignored_auth (the stateful ones have nothing to run on). The few answers the
            # document cannot foresee are excused one by one in `filter_failure` below.
            "checks": {},
            # Browser-like requests from a page of the service's own origin.
            "headers": SAME_SITE,
        }
    )


def load_schema() -> schemathesis.BaseSchema:
    """The document as the app serves it. It depends on the routes alone, so an app without
    a database serves it at import time; every request then goes to the test's own app."""
    with tempfile.TemporaryDirectory() as sessions:
        app = create_app("testing", SQLALCHEMY_DATABASE_URI="sqlite://", SESSION_FILE_DIR=sessions)
        return schemathesis.openapi.from_wsgi("/openapi.json", app, config=fuzz_config())


schema = load_schema()


# 422s the document cannot foresee: they depend on the rows in the database or on two fields
# together (API.md: a body naming a row that does not exist is a 422 on that field), or on
# the calendar.
DEPENDS_ON_STATE = re.compile(
    r"^No \w+ '.*'( at this location)?\.$"
    r"|cannot be its own parent|cannot have subcategories|has subcategories, so it cannot"
    r"|is a top-level category|is reserved; choose another slug|Cannot derive a slug"
    r"|This is already your address|Must not be the e-mail address|^Listed twice\.$"
    r"|commonly used or breached password"
    # One of two fields (`id` or `slug`): said in the schema's description, not as `anyOf`,
    # which generated clients cannot type.
    r"|^Give the id or the current slug of the target\.$"
    # Bulk moderation: one of `ids` or `filter`, `employer` with setEmployer alone (said in
    # the descriptions), and a filter's match count (the rows).
    r"|^Give either ids or filter\.$|^setEmployer needs the employer|^Only setEmployer takes"
    r"|^Matches more than [0-9,]+ votes"
    # Webhooks: where a URL's host resolves to (the network), https unless the settings
    # allow http, and which events a location's subscription may ask for (said in words).
    r"|^Must be an https URL\.$|^Must be an http\(s\) URL\.$|does not resolve\.$|resolves to"
    r"|did not resolve in time\.$"
    # A port the `uri` format allows and TCP does not (73245).
    r"|^The port must be a number from 0 to 65535\.$"
    r"|^Must not carry credentials|^Not events of this kind of subscription"
    # A date the pattern allows and the calendar does not (February 30th).
    r"|^There is no such day\.$"
)


def messages(errors: Any) -> Iterator[str]:
    if isinstance(errors, str):
        yield errors
    elif isinstance(errors, dict):
        for value in errors.values():
            yield from messages(value)
    elif isinstance(errors, list):
        for value in errors:
            yield from messages(value)


def special_use_address(value: Any) -> bool:
    """An address on an RFC 6761 domain (.test, .localhost …): `format: email` allows it,
    the app refuses it, as the document's description says. Schemathesis draws .test."""
    try:
        validate_email(value, check_deliverability=False)
    except EmailNotValidError as error:
        return "special-use or reserved" in str(error)
    return False


def depends_on_state(case: schemathesis.Case, response: schemathesis.Response) -> bool:
    """A 422 whose every complaint is one the document cannot foresee."""
    if response.status_code != 422:
        return False
    if case.media_type == "text/csv":
        # JSON Schema cannot say what a valid CSV import is (its header, its rows through
        # the listing schema); the document describes it in words.
        return True
    errors = response.json().get("errors") or {}
    body = case.body if isinstance(case.body, dict) else {}
    return bool(errors) and all(
        (problems == ["Not a valid email address."] and special_use_address(body.get(field)))
        or all(DEPENDS_ON_STATE.search(message) for message in messages(problems))
        for field, problems in errors.items()
    )


@schema.hook
def filter_failure(context, failure, case, response) -> bool:
    """Excuse what the document cannot say.

    A valid-looking body may still name a row that does not exist, or break a rule between
    two fields: the contract's answer is a 422 (DEPENDS_ON_STATE).
    """
    return not (isinstance(failure, RejectedPositiveData) and depends_on_state(case, response))


@pytest.fixture(scope="module")
def fuzz_app(migrated_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """One app for the module (building one per operation would cost more than fuzzing it);
    each test starts from a freshly seeded world all the same."""
    # Rate limits would answer 429 to most of the fuzzer's logins, submissions and resets.
    app = build_app(migrated_database, tmp_path_factory.mktemp("fuzz"), RATELIMIT_ENABLED=False)
    yield app
    with app.app_context():
        db.session.remove()
        empty_all_tables(db.engine)
        db.engine.dispose()


@pytest.fixture
def anonymous_world(fuzz_app: Flask) -> Iterator[World]:
    WORLDS["anonymous"] = World(fuzz_app, "anonymous")
    yield WORLDS["anonymous"]
    del WORLDS["anonymous"]


@pytest.fixture
def super_world(fuzz_app: Flask) -> Iterator[World]:
    WORLDS["super"] = World(fuzz_app, "super")
    yield WORLDS["super"]
    del WORLDS["super"]


def run_case(world: World, case: schemathesis.Case) -> None:
    steer_to_known_rows(case)
    kwargs = {"app": world.app}
    response = None
    try:
        response = case.call(**kwargs)
        case.validate_response(response, transport_kwargs=kwargs)
    finally:
        world.after(case.method, response.status_code if response is not None else None)


# The world fixtures are per operation on purpose: `World.after` rebuilds the rows between
# examples whenever one changed them.
per_operation_fixtures = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@schema.parametrize()
@per_operation_fixtures
def test_fuzz_anonymous(case: schemathesis.Case, anonymous_world: World) -> None:
    run_case(anonymous_world, case)


@schema.parametrize()
@schema.auth(SuperSession, refresh_interval=None)
@per_operation_fixtures
def test_fuzz_as_super(case: schemathesis.Case, super_world: World) -> None:
    run_case(super_world, case)
