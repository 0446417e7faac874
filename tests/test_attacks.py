"""Attacks a client could try, each asserted as the client sees it (status, body, headers,
mail, rows). Only what the other test files leave open is here; each section's comment
says which tests elsewhere already catch the rest.
"""

import io
import json
import uuid
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest

from directory_api import credentials
from directory_api.credentials import hash_password, hash_token
from directory_api.models import (
    Business,
    Employer,
    Location,
    Membership,
    Role,
    TokenPurpose,
    User,
    Vote,
    VoteType,
)
from directory_api.platform.extensions import db

from .conftest import (
    NEW_PASSWORD,
    Clock,
    assert_problem,
    complete_reset,
    database_rows,
    invite,
    link_in,
    queued_mail,
    register,
    reset_token,
    send_outbox,
    signed_in,
    start_reset,
)
from .factories import PASSWORD, make_location, make_user

COOKIE = "session"
THIRD_PASSWORD = "yet another passphrase"
EVIL = "https://evil.example"
FRONTEND = "https://admin.example.org"
MB = 1024 * 1024


# --- helpers --------------------------------------------------------------------------------


def session_cookie(client) -> str | None:
    cookie = client.get_cookie(COOKIE)
    return cookie.value if cookie else None


def login(client, email, password=PASSWORD, *, remember=False, **kwargs):
    body = {"email": email, "password": password, "remember": remember}
    return client.post("/auth/login", json=body, **kwargs)


def user(email: str) -> User:
    db.session.rollback()
    return User.query.filter_by(email=email).one()


def can_sign_in(app, email: str, password: str) -> bool:
    return login(app.test_client(), email, password).status_code == 200


def fill(value, values: dict):
    """The request template `value` with "{name}" placeholders replaced from `values`."""
    if isinstance(value, str):
        return value.format(**values)
    if isinstance(value, dict):
        return {key: fill(item, values) for key, item in value.items()}
    return value


@pytest.fixture
def scene(app):
    """Harbour and Bay, each with staff, listings and a vote; a plain user (Ann) with a
    pending reset link; an invited harbour admin with a pending invitation.

    Written in one transaction: this fixture runs for most tests in this file.
    """
    harbour = Location(slug="harbour", name="Harbour", email="votes@harbour.example")
    bay = Location(slug="bay", name="Bay", email="votes@bay.example")
    password_hash = hash_password(PASSWORD)
    people = {
        name: User(email=email, name=title, password_hash=password_hash, is_super=is_super)
        for name, email, title, is_super in [
            ("super", "super@example.com", "Super", True),
            ("owner", "owner@example.com", "Owner", False),
            ("admin", "admin@example.com", "Admin", False),
            ("ann", "ann@example.com", "Ann", False),
            ("bay_admin", "bay-admin@example.com", "Bay Admin", False),
        ]
    }
    people["invited"] = User(email="invited@example.com")
    listings = {
        "cafe": Business(location=harbour, slug="cafe", name="Cafe"),
        "bay_shop": Business(location=bay, slug="bay-shop", name="Bay Shop"),
        "acme": Employer(location=harbour, slug="acme", name="Acme"),
        "bay_corp": Employer(location=bay, slug="bay-corp", name="Bay Corp"),
    }
    db.session.add_all([harbour, bay, *people.values(), *listings.values()])
    db.session.flush()
    db.session.add_all(
        Membership(user_id=people[name].id, location_id=location.id, role=role)
        for name, location, role in [
            ("owner", harbour, Role.OWNER),
            ("admin", harbour, Role.ADMIN),
            ("invited", harbour, Role.ADMIN),
            ("bay_admin", bay, Role.ADMIN),
        ]
    )
    votes = {
        name: Vote(
            location_id=location.id,
            type=VoteType.EMPLOYER,
            active=False,
            your_name="Val Voter",
            your_email=f"{name}-voter@example.com",
            your_phone="+44 1",
            business_name="Acme",
            business_branch="Quay",
            vote_body="Fine",
            your_position="Clerk",
        )
        for name, location in (("vote", harbour), ("bay_vote", bay))
    }
    db.session.add_all(votes.values())
    invitation = credentials.issue_token(
        people["invited"], TokenPurpose.INVITATION, email="invited@example.com"
    )
    reset = credentials.issue_token(people["ann"], TokenPurpose.PASSWORD_RESET)
    db.session.flush()
    values = {
        **{name: str(person.id) for name, person in people.items()},
        **{name: str(listing.id) for name, listing in listings.items()},
        **{name: str(vote.id) for name, vote in votes.items()},
        "invitation": invitation,
        "reset": reset,
    }
    db.session.commit()

    def client(who: str):
        if who == "anonymous":
            return app.test_client()
        return signed_in(app, people[who].email)

    return SimpleNamespace(app=app, values=values, client=client)


# --- 1. session fixation --------------------------------------------------------------------
# Login is covered in test_auth.py; registration also signs in and must rotate the id too.


@pytest.mark.parametrize("planted", ["stored", "made-up"])
def test_registration_does_not_sign_in_a_planted_session(super_client, app, planted):
    make_location("harbour")
    user_id, token = invite(super_client, "olive@example.com")
    make_user("mallory@example.com")
    attacker = signed_in(app, "mallory@example.com") if planted == "stored" else app.test_client()
    planted_id = session_cookie(attacker) or "planted-by-an-attacker"

    victim = app.test_client()
    victim.set_cookie(COOKIE, planted_id)
    assert register(victim, user_id, token).status_code == 200
    assert session_cookie(victim) not in (None, planted_id)
    assert victim.get("/me/").get_json()["email"] == "olive@example.com"

    holder = app.test_client()
    holder.set_cookie(COOKIE, planted_id)
    assert_problem(holder.get("/me/"), 401)  # the planted id signs nobody in


# --- 2. logout replay -----------------------------------------------------------------------
# test_auth.py replays a browser-session cookie with reads; here a remembered one, with a write.


def test_a_remembered_cookie_replayed_after_logout_cannot_write(app):
    make_user("super@example.com", is_super=True)
    client = app.test_client()
    assert login(client, "super@example.com", remember=True).status_code == 200
    copied = session_cookie(client)
    assert client.post("/auth/logout").status_code == 204
    replay = app.test_client()
    replay.set_cookie(COOKIE, copied)
    assert_problem(replay.post("/regions/", json={"name": "North"}), 401)
    assert_problem(replay.get("/me/"), 401)
    assert database_rows()["regions"] == []


# --- 3. a password change ends the user's other sessions --------------------------------------
# test_me.py checks another browser-session login; here a remembered session and a stolen copy
# of the changing session's own cookie.


def test_password_change_ends_remembered_and_stolen_sessions(app):
    make_user("ann@example.com")
    changer = signed_in(app, "ann@example.com")
    remembered = app.test_client()
    assert login(remembered, "ann@example.com", remember=True).status_code == 200
    stolen = app.test_client()
    stolen.set_cookie(COOKIE, session_cookie(changer))
    assert stolen.get("/me/").status_code == 200  # the thief is in, until the change

    response = changer.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD}
    )
    assert response.status_code == 204
    assert changer.get("/me/").get_json()["email"] == "ann@example.com"
    assert_problem(remembered.get("/me/"), 401)
    assert_problem(stolen.get("/me/"), 401)
    assert_problem(stolen.put(f"/me/id/{user('ann@example.com').id}", json={"name": "X"}), 401)
    assert user("ann@example.com").name is None


def test_password_reset_ends_a_remembered_session(app, client):
    make_user("ann@example.com")
    remembered = app.test_client()
    assert login(remembered, "ann@example.com", remember=True).status_code == 200
    start_reset(client, "ann@example.com")
    assert complete_reset(client, reset_token("ann@example.com")).status_code == 204
    assert_problem(remembered.get("/me/"), 401)


# --- 4. token reuse -------------------------------------------------------------------------
# test_me.py checks the second use is a 404; here also that it changed nothing.


def test_a_reused_reset_token_changes_nothing(app, client):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    assert complete_reset(client, token).status_code == 204
    before = database_rows()
    again = complete_reset(app.test_client(), token, THIRD_PASSWORD)
    body = assert_problem(again, 404)
    assert "ann@example.com" not in json.dumps(body)
    assert database_rows() == before
    assert not can_sign_in(app, "ann@example.com", THIRD_PASSWORD)
    assert can_sign_in(app, "ann@example.com", NEW_PASSWORD)
    changed = [m for m in queued_mail("ann@example.com") if "changed" in m.subject]
    assert len(changed) == 1


def test_a_reused_invitation_token_changes_nothing_and_signs_nobody_in(super_client, app):
    make_location("harbour")
    user_id, token = invite(super_client, "olive@example.com")
    assert register(app.test_client(), user_id, token, name="Olive").status_code == 200
    before = database_rows()
    intruder = app.test_client()
    again = register(intruder, user_id, token, THIRD_PASSWORD, name="Mallory")
    assert_problem(again, 404)
    assert "Set-Cookie" not in again.headers
    assert_problem(intruder.get("/me/"), 401)
    assert database_rows() == before
    assert user("olive@example.com").name == "Olive"
    assert not can_sign_in(app, "olive@example.com", THIRD_PASSWORD)
    assert can_sign_in(app, "olive@example.com", NEW_PASSWORD)


# --- 5. expiry on a shifted clock, and tampering ----------------------------------------------
# test_me.py backdates rows; these move the clock the token code reads, so the lifetimes
# themselves (1 hour, 7 days) are what is tested.


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The project's own utcnow, frozen and moved by hand where tokens are issued and read."""
    frozen = Clock()
    monkeypatch.setattr(credentials, "utcnow", frozen)
    return frozen


@pytest.mark.parametrize(("minutes", "status"), [(59, 204), (61, 404)])
def test_a_reset_token_lasts_one_hour(app, client, clock, minutes, status):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    clock.advance(minutes=minutes)
    assert complete_reset(client, token).status_code == status
    assert can_sign_in(app, "ann@example.com", NEW_PASSWORD) is (status == 204)
    assert can_sign_in(app, "ann@example.com", PASSWORD) is (status == 404)


@pytest.mark.parametrize(
    ("elapsed", "status"), [({"days": 7, "minutes": -1}, 200), ({"days": 7, "minutes": 1}, 404)]
)
def test_an_invitation_lasts_seven_days(super_client, app, clock, elapsed, status):
    make_location("harbour")
    user_id, token = invite(super_client, "olive@example.com")
    clock.advance(**elapsed)
    response = register(app.test_client(), user_id, token)
    assert response.status_code == status
    assert user("olive@example.com").status == ("active" if status == 200 else "invited")


def truncated(token: str) -> str:
    return token[:-1]


def extended(token: str) -> str:
    return token + "A"


def flipped_first(token: str) -> str:
    return ("B" if token[0] == "A" else "A") + token[1:]


def swapped_case(token: str) -> str:
    return token.swapcase()


def stored_hash(token: str) -> str:
    """What a leaked database row holds: never usable as the token."""
    return hash_token(token)


MANGLES = [truncated, extended, flipped_first, swapped_case, stored_hash]


@pytest.mark.parametrize("mangle", MANGLES, ids=lambda f: f.__name__)
def test_a_tampered_reset_token_is_404_and_leaves_the_real_one_working(app, client, mangle):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    assert mangle(token) != token
    assert_problem(complete_reset(client, mangle(token)), 404)
    assert can_sign_in(app, "ann@example.com", PASSWORD)
    assert complete_reset(client, token).status_code == 204


@pytest.mark.parametrize("mangle", MANGLES, ids=lambda f: f.__name__)
def test_a_tampered_invitation_token_is_404_and_leaves_the_real_one_working(
    super_client, app, mangle
):
    make_location("harbour")
    user_id, token = invite(super_client, "olive@example.com")
    assert_problem(register(app.test_client(), user_id, mangle(token)), 404)
    assert user("olive@example.com").status == "invited"
    assert register(app.test_client(), user_id, token).status_code == 200


def test_one_invitees_token_does_not_register_another(super_client, app):
    make_location("harbour")
    olive_id, olive_token = invite(super_client, "olive@example.com")
    pete_id, pete_token = invite(super_client, "pete@example.com")
    assert_problem(register(app.test_client(), pete_id, olive_token), 404)
    assert_problem(register(app.test_client(), olive_id, pete_token), 404)
    assert {user(e).status for e in ("olive@example.com", "pete@example.com")} == {"invited"}
    # The refused attempts did not use either token up.
    assert register(app.test_client(), olive_id, olive_token).status_code == 200
    assert register(app.test_client(), pete_id, pete_token).status_code == 200


def test_a_token_only_works_for_its_own_purpose(scene):
    app, values = scene.app, scene.values
    ann = scene.client("ann")
    ann.post("/me/email-update", json={"email": "ann@new.example", "password": PASSWORD})
    email_token = link_in(queued_mail("ann@new.example")[0].body, "/email-update/")
    before = database_rows()
    # An invitation or e-mail change token does not reset a password ...
    for token in (values["invitation"], email_token):
        assert_problem(complete_reset(app.test_client(), token), 404)
    # ... a reset or e-mail change token does not accept an invitation ...
    for token in (values["reset"], email_token):
        assert_problem(register(app.test_client(), values["invited"], token), 404)
    # ... and neither confirms an e-mail change.
    for token in (values["reset"], values["invitation"]):
        assert_problem(app.test_client().post(f"/me/email-update/{token}"), 404)
    assert database_rows() == before


# --- 6. user enumeration --------------------------------------------------------------------
# test_auth.py and test_me.py compare status and body; these compare every header too (each
# attempt from its own address, so the rate-limit counters start alike) and the hashing cost.

VARYING_HEADERS = {"X-Request-ID", "Date"}
# Read off the clock in whole seconds: equal unless a second boundary falls between two
# requests, so they are compared within one second of each other (look_alike).
CLOCK_HEADERS = {"Retry-After", "X-RateLimit-Reset"}


def comparable(response) -> tuple:
    headers = sorted(
        (name, value)
        for name, value in response.headers
        if name not in VARYING_HEADERS | CLOCK_HEADERS
    )
    clock = {
        name: int(response.headers[name]) for name in CLOCK_HEADERS & set(response.headers.keys())
    }
    return response.status_code, response.get_data(), headers, clock


def look_alike(answers: list[tuple]) -> bool:
    """Same status, body and headers; clock-derived headers within a second of each other."""
    first = answers[0]
    for answer in answers:
        if answer[:3] != first[:3] or answer[3].keys() != first[3].keys():
            return False
        if any(abs(answer[3][name] - first[3][name]) > 1 for name in first[3]):
            return False
    return True


class CountingHasher:
    def __init__(self, inner) -> None:
        self.inner = inner
        self.verifications = 0

    def verify(self, *args):
        self.verifications += 1
        return self.inner.verify(*args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_login_failures_look_alike_down_to_headers_and_hashing_cost(app, monkeypatch):
    make_user("ann@example.com")
    make_user("invited@example.com", password=None)
    hasher = CountingHasher(app.extensions["password_hasher"])
    monkeypatch.setitem(app.extensions, "password_hasher", hasher)
    answers, costs = [], []
    for number, email in enumerate(
        ("ann@example.com", "nobody@example.com", "invited@example.com")
    ):
        hasher.verifications = 0
        password = "wrong password!" if email == "ann@example.com" else PASSWORD
        response = login(
            app.test_client(), email, password, environ_base={"REMOTE_ADDR": f"10.6.0.{number}"}
        )
        answers.append(comparable(response))
        costs.append(hasher.verifications)
    assert answers[0][0] == 401
    assert look_alike(answers), answers
    assert "Set-Cookie" not in dict(answers[0][2])
    assert costs == [1, 1, 1]


def test_reset_requests_look_alike_down_to_headers(app):
    make_user("ann@example.com")
    make_user("invited@example.com", password=None)
    answers = [
        comparable(
            app.test_client().post(
                "/me/password-reset",
                json={"email": email},
                environ_base={"REMOTE_ADDR": f"10.7.0.{number}"},
            )
        )
        for number, email in enumerate(
            ("ann@example.com", "nobody@example.com", "invited@example.com")
        )
    ]
    assert answers[0][0] == 202
    assert look_alike(answers), answers
    assert "Set-Cookie" not in dict(answers[0][2])
    assert [m.recipients for m in queued_mail()] == [["ann@example.com"]]


# An employer vote's fields, but its body (staff votes, forms and bodies below).
VOTE_FIELDS = {
    "yourName": "Val",
    "yourEmail": "val@example.com",
    "yourPhone": "+44 1",
    "businessName": "Acme",
    "businessBranch": "Quay",
    "yourPosition": "Clerk",
}


# --- 7 and 8. cross-site requests and non-JSON bodies -----------------------------------------
# test_protection.py checks POST /regions/; these check every other kind of unsafe request,
# including the ones that sign in, sign out and take tokens, and that nothing changed.

UNSAFE = {
    "login": (
        "anonymous",
        "POST",
        "/auth/login",
        {"email": "ann@example.com", "password": PASSWORD},
    ),
    "logout": ("ann", "POST", "/auth/logout", None),
    "reset-start": ("anonymous", "POST", "/me/password-reset", {"email": "ann@example.com"}),
    "reset-complete": (
        "anonymous",
        "POST",
        "/me/password-reset/{reset}",
        {"password": NEW_PASSWORD},
    ),
    "register": (
        "anonymous",
        "POST",
        "/me/register/{invited}",
        {"token": "{invitation}", "password": NEW_PASSWORD},
    ),
    "password-update": (
        "ann",
        "POST",
        "/me/password-update",
        {"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD},
    ),
    "email-update": (
        "ann",
        "POST",
        "/me/email-update",
        {"email": "new@example.com", "password": PASSWORD},
    ),
    "details": ("ann", "PUT", "/me/id/{ann}", {"name": "Changed"}),
    "invite-super": ("super", "POST", "/supers/", {"email": "new@example.com"}),
    "invite-admin": ("owner", "POST", "/locations/harbour/admins/", {"email": "new@example.com"}),
    "edit-admin": ("owner", "PUT", "/locations/harbour/admins/id/{admin}", {"name": "Changed"}),
    "remove-admin": ("owner", "DELETE", "/locations/harbour/admins/id/{admin}", None),
    "location": ("owner", "PUT", "/locations/slug/harbour", {"name": "Changed"}),
    "listing-create": ("admin", "POST", "/locations/harbour/businesses/", {"name": "New Place"}),
    "listing-update": (
        "admin",
        "PUT",
        "/locations/harbour/businesses/",
        {"slug": "cafe", "name": "Changed"},
    ),
    "listing-delete": ("admin", "DELETE", "/locations/harbour/businesses/", {"slug": "cafe"}),
    "vote-create": (
        "admin",
        "POST",
        "/locations/harbour/votes/",
        {**VOTE_FIELDS, "voteBody": "Fine"},
    ),
    "vote-moderate": (
        "admin",
        "PUT",
        "/locations/harbour/votes/",
        {"id": "{vote}", "active": True},
    ),
    "vote-delete": ("admin", "DELETE", "/locations/harbour/votes/", {"id": "{vote}"}),
    "region": ("super", "POST", "/regions/", {"name": "North"}),
}
WITH_BODY = [name for name, (_, _, _, body) in UNSAFE.items() if body is not None]


def send(scene, name: str, **kwargs):
    """One of UNSAFE, by its caller; the client, the response and the rows before it."""
    who, method, path, body = UNSAFE[name]
    client = scene.client(who)
    before = database_rows()
    if body is not None and "data" not in kwargs:
        kwargs["json"] = fill(body, scene.values)
    response = client.open(fill(path, scene.values), method=method, **kwargs)
    return client, response, before


def assert_refused(name: str, client, response, before, status: int) -> None:
    assert_problem(response, status)
    assert database_rows() == before
    assert "Set-Cookie" not in response.headers  # nobody signed in, nobody signed out
    if UNSAFE[name][0] != "anonymous":
        assert client.get("/me/").status_code == 200


@pytest.mark.parametrize("name", UNSAFE)
def test_same_origin_requests_succeed(scene, name):
    """The control: each request below is refused for its headers or body alone."""
    _, response, _ = send(scene, name, headers={"Origin": "http://localhost"})
    assert 200 <= response.status_code < 300, response.get_json()


@pytest.mark.parametrize(
    "headers",
    [{"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"}],
    ids=["origin", "fetch-metadata"],
)
@pytest.mark.parametrize("name", UNSAFE)
def test_cross_site_unsafe_requests_are_refused(scene, name, headers):
    client, response, before = send(scene, name, headers=headers)
    assert_refused(name, client, response, before, 403)
    assert "Cross-site" in response.get_json()["detail"]


@pytest.mark.parametrize("vote_type", ["btoc", "employer"])
def test_a_cross_site_form_submits_a_vote_only_as_someone_signed_out(scene, vote_type):
    """Any site's form may post a vote (issue 18): it needs no credentials. A staff member's
    cookie riding along gives it nothing: the vote arrives like any public one."""
    form = {
        "yourName": "Val",
        "yourEmail": "val@example.com",
        "yourPhone": "+44 1",
        "businessName": "Acme",
        "businessBranch": "Quay",
        "voteBody": "Fine",
        **({"yourPosition": "Clerk"} if vote_type == "employer" else {}),
    }
    staff = scene.client("super")
    response = staff.post(
        f"/locations/harbour/votes/submit/{vote_type}",
        data=form,
        headers={"Origin": EVIL, "Sec-Fetch-Site": "cross-site"},
    )
    assert response.status_code in (201, 202), response.get_json()
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response.headers
    db.session.rollback()
    if vote_type == "employer":  # stored, inactive, like every public vote
        assert db.session.get(Vote, uuid.UUID(response.get_json()["id"])).active is False
    # Not a write by the signed-in user: the audit log has nothing of it.
    assert staff.get("/audit/?action=vote.create").get_json()["total"] == 0


def test_the_configured_frontend_on_another_site_is_let_through(app_factory):
    app = app_factory(CORS_ORIGINS=[FRONTEND])
    with app.app_context():
        make_user("ann@example.com")
        client = app.test_client()
        cross_site = {"Origin": FRONTEND, "Sec-Fetch-Site": "cross-site"}
        assert login(client, "ann@example.com", headers=cross_site).status_code == 200
        ann = user("ann@example.com")
        response = client.put(f"/me/id/{ann.id}", json={"name": "Ann"}, headers=cross_site)
        assert response.status_code == 200
        assert user("ann@example.com").name == "Ann"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("name", WITH_BODY)
def test_json_only_endpoints_refuse_plain_text_and_form_bodies(scene, name, content_type):
    # A cross-site HTML form can send exactly these two without a CORS preflight.
    body = fill(UNSAFE[name][3], scene.values)
    data = json.dumps(body) if content_type == "text/plain" else urlencode(body)
    client, response, before = send(scene, name, data=data, content_type=content_type)
    assert_refused(name, client, response, before, 415)


# --- 9. one location's staff against another location ---------------------------------------
# Reads and writes through the other location's URL, and votes, are covered in
# test_votes.py, test_listings.py and test_members.py; these name the other location's
# records through the caller's own location.


@pytest.mark.parametrize(
    ("method", "body"), [("GET", None), ("PUT", {"name": "Mine"}), ("DELETE", None)]
)
def test_an_owner_cannot_reach_another_locations_admin_through_their_own(scene, method, body):
    owner = scene.client("owner")
    before = database_rows()
    path = f"/locations/harbour/admins/id/{scene.values['bay_admin']}"
    response = owner.open(path, method=method, json=body)
    assert_problem(response, 404)
    assert "bay-admin@example.com" not in response.get_data(as_text=True)
    assert database_rows() == before
    via_bay = owner.open(
        f"/locations/bay/admins/id/{scene.values['bay_admin']}", method=method, json=body
    )
    assert_problem(via_bay, 403)
    assert database_rows() == before


@pytest.mark.parametrize(
    ("kind", "target"), [("businesses", "bay_shop"), ("employers", "bay_corp")]
)
@pytest.mark.parametrize(
    ("method", "changes"), [("PUT", {"name": "Mine"}), ("DELETE", {})], ids=["PUT", "DELETE"]
)
@pytest.mark.parametrize("naming", ["id", "slug"])
def test_staff_cannot_name_another_locations_listing_in_a_body(
    scene, kind, target, method, changes, naming
):
    admin = scene.client("admin")
    name = {"id": scene.values[target], "slug": target.replace("_", "-")}[naming]
    before = database_rows()
    response = admin.open(
        f"/locations/harbour/{kind}/", method=method, json={naming: name, **changes}
    )
    assert_problem(response, 404)
    assert database_rows() == before


def test_inviting_another_locations_admin_reveals_nothing_about_the_other_location(scene):
    response = scene.client("owner").post(
        "/locations/harbour/admins/", json={"email": "bay-admin@example.com"}
    )
    assert response.status_code == 201
    # An existing account is offered the role (API.md 9): the answer says who, nothing more.
    assert response.get_json() == {
        "id": scene.values["bay_admin"],
        "email": "bay-admin@example.com",
        "status": "active",
    }
    assert "bay" not in response.get_data(as_text=True).replace("bay-admin@", "")


def test_an_owner_cannot_read_another_locations_private_votes(scene):
    owner = scene.client("owner")
    listed = owner.get("/locations/bay/votes/?active=false")
    assert listed.status_code == 200
    assert listed.get_json()["total"] == 0
    assert_problem(owner.get(f"/locations/bay/votes/id/{scene.values['bay_vote']}"), 404)
    assert_problem(owner.get(f"/locations/harbour/votes/id/{scene.values['bay_vote']}"), 404)
    assert "bay_vote-voter@example.com" not in listed.get_data(as_text=True)


# --- 10. privilege fields in bodies ---------------------------------------------------------
# test_me.py, test_members.py, test_supers.py, test_listings.py and test_votes.py cover
# isSuper/roles on /me/id, role/isSuper on invitations, location on listing create and vote
# moderation; these are the remaining ones.

PRIVILEGED = [
    (
        "anonymous",
        "POST",
        "/auth/login",
        {"email": "ann@example.com", "password": PASSWORD, "isSuper": True},
        "isSuper",
    ),
    (
        "anonymous",
        "POST",
        "/me/register/{invited}",
        {"token": "{invitation}", "password": NEW_PASSWORD, "isSuper": True},
        "isSuper",
    ),
    (
        "anonymous",
        "POST",
        "/me/register/{invited}",
        {
            "token": "{invitation}",
            "password": NEW_PASSWORD,
            "roles": [{"location": "bay", "role": "owner"}],
        },
        "roles",
    ),
    (
        "anonymous",
        "POST",
        "/me/register/{invited}",
        {"token": "{invitation}", "password": NEW_PASSWORD, "email": "x@example.com"},
        "email",
    ),
    (
        "anonymous",
        "POST",
        "/me/register/{invited}",
        {"token": "{invitation}", "password": NEW_PASSWORD, "id": "{ann}"},
        "id",
    ),
    ("ann", "PUT", "/me/id/{ann}", {"name": "Ann", "id": "{super}"}, "id"),
    ("ann", "PUT", "/me/id/{ann}", {"name": "Ann", "location": "harbour"}, "location"),
    ("ann", "PUT", "/me/id/{ann}", {"status": "active"}, "status"),
    (
        "ann",
        "POST",
        "/me/email-update",
        {"email": "new@example.com", "password": PASSWORD, "isSuper": True},
        "isSuper",
    ),
    (
        "ann",
        "POST",
        "/me/password-update",
        {"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD, "isSuper": True},
        "isSuper",
    ),
    ("owner", "PUT", "/locations/harbour/admins/id/{admin}", {"isSuper": True}, "isSuper"),
    ("owner", "PUT", "/locations/harbour/admins/id/{admin}", {"location": "bay"}, "location"),
    (
        "owner",
        "PUT",
        "/locations/harbour/admins/id/{admin}",
        {"id": "{bay_admin}", "name": "X"},
        "id",
    ),
    (
        "owner",
        "POST",
        "/locations/harbour/admins/",
        {"email": "new@example.com", "location": "bay"},
        "location",
    ),
    (
        "owner",
        "POST",
        "/locations/harbour/admins/",
        {"email": "new@example.com", "roles": [{"location": "bay", "role": "owner"}]},
        "roles",
    ),
    ("super", "POST", "/supers/", {"email": "new@example.com", "roles": []}, "roles"),
    ("super", "PUT", "/supers/id/{super}", {"isSuper": False}, "isSuper"),
    (
        "admin",
        "PUT",
        "/locations/harbour/businesses/",
        {"slug": "cafe", "location": "bay"},
        "location",
    ),
    ("admin", "POST", "/locations/harbour/businesses/", {"name": "New", "id": "{cafe}"}, "id"),
    (
        "admin",
        "POST",
        "/locations/harbour/votes/",
        {
            **VOTE_FIELDS,
            "voteBody": "Fine",
            "location": "bay",
        },
        "location",
    ),
    (
        "admin",
        "POST",
        "/locations/harbour/votes/",
        {
            **VOTE_FIELDS,
            "voteBody": "Fine",
            "id": "{vote}",
        },
        "id",
    ),
    ("super", "POST", "/regions/", {"name": "North", "id": str(uuid.UUID(int=1))}, "id"),
    ("super", "PUT", "/locations/slug/harbour", {"id": str(uuid.UUID(int=1))}, "id"),
]


@pytest.mark.parametrize(
    ("who", "method", "path", "body", "field"),
    PRIVILEGED,
    ids=[f"{p[1]} {p[2]} {p[4]}" for p in PRIVILEGED],
)
def test_privilege_fields_are_422_and_change_nothing(scene, who, method, path, body, field):
    client = scene.client(who)
    before = database_rows()
    response = client.open(fill(path, scene.values), method=method, json=fill(body, scene.values))
    assert field in assert_problem(response, 422)["errors"]
    assert "Set-Cookie" not in response.headers
    assert database_rows() == before


# --- 11. CR/LF injection into mail headers --------------------------------------------------
# test_votes.py refuses line breaks in one-line vote fields and yourEmail, and test_supers.py
# a line break in an invited super's name; these cover the other ways into a header, and
# check a delivered message.

INJECTED_ADDRESSES = [
    "new@example.com\r\nBcc: evil@example.com",
    "new@example.com\nBcc: evil@example.com",
    "new@example.com, evil@example.com",
    '"New" <new@example.com>',
    "new@example.com\u2028Bcc: evil@example.com",
]


def assert_no_injected_mail() -> None:
    for message in queued_mail():
        for address in [*message.recipients, message.reply_to or ""]:
            assert "evil" not in address
            assert not {"\r", "\n", ","} & set(address)
        assert "\n" not in message.subject and "\r" not in message.subject


@pytest.mark.parametrize("address", INJECTED_ADDRESSES)
@pytest.mark.parametrize(
    ("who", "path"),
    [
        ("super", "/supers/"),
        ("super", "/locations/harbour/owners/"),
        ("owner", "/locations/harbour/admins/"),
    ],
)
def test_an_injected_invitation_address_is_422_and_mails_nothing(scene, who, path, address):
    client = scene.client(who)
    before = database_rows()
    response = client.post(path, json={"email": address})
    assert "email" in assert_problem(response, 422)["errors"]
    assert database_rows() == before
    assert_no_injected_mail()


@pytest.mark.parametrize("name", ["Olive\r\nBcc: evil@example.com", "Olive\u2028Bcc: x"])
def test_an_injected_invitation_name_is_422(scene, name):
    response = scene.client("owner").post(
        "/locations/harbour/admins/", json={"email": "new@example.com", "name": name}
    )
    assert "name" in assert_problem(response, 422)["errors"]
    assert queued_mail("new@example.com") == []


@pytest.mark.parametrize("address", INJECTED_ADDRESSES)
def test_an_injected_address_gets_no_mail_from_a_reset_or_an_email_change(scene, address):
    response = start_reset(scene.client("anonymous"), address.replace("new@", "ann@"))
    assert response.status_code in (202, 422)
    ann = scene.client("ann")
    before = database_rows()
    changed = ann.post("/me/email-update", json={"email": address, "password": PASSWORD})
    assert "email" in assert_problem(changed, 422)["errors"]
    assert database_rows() == before
    assert_no_injected_mail()


@pytest.mark.parametrize("field", ["name", "email"], ids=["name-in-subject", "email-is-recipient"])
def test_an_owner_cannot_put_a_line_break_into_the_location_vote_mail_headers(scene, field):
    value = {
        "name": "Harbour\r\nBcc: evil@example.com",
        "email": "votes@harbour.example\r\nBcc: evil@example.com",
    }[field]
    owner = scene.client("owner")
    before = database_rows()
    response = owner.put("/locations/slug/harbour", json={field: value})
    assert field in assert_problem(response, 422)["errors"]
    assert database_rows() == before


def test_a_multiline_vote_body_stays_in_the_body_of_the_delivered_mail(mail_app, mailbox):
    make_location("harbour", name="Harbour", email="votes@harbour.example")
    injection = "Fine.\r\nBcc: evil@example.com\r\nSubject: Hacked\r\n\r\nTo: evil@example.com"
    form = {
        "yourName": "Val",
        "yourEmail": "val@example.com",
        "yourPhone": "+44 1",
        "businessName": "Acme",
        "businessBranch": "Quay",
        "voteBody": injection,
    }
    response = mail_app.test_client().post("/locations/harbour/votes/submit/btoc", data=form)
    assert response.status_code == 202
    assert "sent 1, failed 0" in send_outbox(mail_app)
    [message] = mailbox.messages
    assert mailbox.envelopes[0][1] == ["votes@harbour.example"]
    assert message.get_all("Bcc") is None
    assert message.get_all("To") == ["votes@harbour.example"]
    assert message.get_all("Subject") == ["New business-to-consumer vote for Harbour"]
    assert message.get_all("Reply-To") == ["val@example.com"]
    assert "Bcc: evil@example.com" in message.get_content()


# --- 12. a 1 MB body ------------------------------------------------------------------------
# test_errors.py and test_votes.py send just over the 64 KiB limit with a Content-Length;
# these send a full megabyte, also chunked (no Content-Length) and as forms.


HUGE = "x" * MB


def multipart(fields: dict[str, str]) -> bytes:
    parts = [
        f'--x\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    ]
    return ("".join(parts) + "--x--\r\n").encode()


def chunked(body: bytes, content_type: str) -> dict:
    # As gunicorn passes a chunked body: no Content-Length, the stream marked terminated.
    return {
        "input_stream": io.BytesIO(body),
        "headers": {"Transfer-Encoding": "chunked", "Content-Type": content_type},
        "environ_base": {"wsgi.input_terminated": True},
    }


VOTE = "/locations/harbour/votes/submit/employer"
HUGE_VOTE = {**VOTE_FIELDS, "voteBody": HUGE}
MEGABYTE_REQUESTS = {
    "json": ("super", "/regions/", lambda: {"json": {"name": HUGE}}),
    "login": (
        "anonymous",
        "/auth/login",
        lambda: {"json": {"email": "ann@example.com", "password": HUGE}},
    ),
    "json-vote": ("anonymous", VOTE, lambda: {"json": HUGE_VOTE}),
    "urlencoded-vote": (
        "anonymous",
        VOTE,
        lambda: {"data": urlencode(HUGE_VOTE), "content_type": "application/x-www-form-urlencoded"},
    ),
    "multipart-vote": (
        "anonymous",
        VOTE,
        lambda: {"data": multipart(HUGE_VOTE), "content_type": "multipart/form-data; boundary=x"},
    ),
    "chunked-multipart-vote": (
        "anonymous",
        VOTE,
        lambda: chunked(multipart(HUGE_VOTE), "multipart/form-data; boundary=x"),
    ),
}


@pytest.mark.parametrize("name", MEGABYTE_REQUESTS)
def test_a_megabyte_body_is_413_and_stores_nothing(scene, name):
    who, path, make_request = MEGABYTE_REQUESTS[name]
    client = scene.client(who)
    before = database_rows()
    response = client.post(path, **make_request())
    assert_problem(response, 413)
    assert "Set-Cookie" not in response.headers
    assert database_rows() == before


@pytest.mark.parametrize(
    ("who", "path", "content_type", "body"),
    [
        ("super", "/regions/", "application/json", b'{"name": "North"}' + b" " * MB),
        (
            "anonymous",
            VOTE,
            "application/x-www-form-urlencoded",
            urlencode({**VOTE_FIELDS, "voteBody": "Fine"}).encode() + b"&" * MB,
        ),
    ],
    ids=["json-padded-with-spaces", "form-padded-with-ampersands"],
)
def test_a_chunked_megabyte_body_is_413_and_stores_nothing(scene, who, path, content_type, body):
    # Padding that parsers skip: cut at the limit, what is left would still be a valid body
    # (werkzeug stops reading an unannounced body at the limit; protection.py looks past it).
    client = scene.client(who)
    before = database_rows()
    response = client.post(path, **chunked(body, content_type))
    assert_problem(response, 413)
    assert database_rows() == before


def test_a_body_just_under_the_limit_is_taken(scene):
    """The control for the above: the limit, not something else, refuses them."""
    body = {**VOTE_FIELDS, "voteBody": "x" * 5000}
    assert (
        scene.client("anonymous")
        .post(VOTE, **chunked(urlencode(body).encode(), "application/x-www-form-urlencoded"))
        .status_code
        == 201
    )
    assert database_rows()["votes"] != []


# --- 13. spoofed client addresses without ProxyFix --------------------------------------------
# test_auth.py shows X-Forwarded-For changing between two batches of logins; these change a
# spoofable header on every request, on each rate-limited public endpoint, and behind a proxy
# that appends the real address.

SPOOFS = {
    "x-forwarded-for": lambda n: {"X-Forwarded-For": f"198.51.100.{n}"},
    "x-real-ip": lambda n: {"X-Real-IP": f"198.51.100.{n}"},
    "forwarded": lambda n: {"Forwarded": f"for=198.51.100.{n}"},
    "all": lambda n: {
        "X-Forwarded-For": f"198.51.100.{n}",
        "X-Real-IP": f"198.51.100.{n}",
        "Forwarded": f"for=198.51.100.{n}",
        "X-Client-IP": f"198.51.100.{n}",
    },
}


@pytest.mark.parametrize("spoof", SPOOFS)
def test_a_burst_of_logins_with_a_new_spoofed_address_each_time_is_limited(client, app, spoof):
    statuses = [
        login(client, f"guess{n}@example.com", headers=SPOOFS[spoof](n)).status_code
        for n in range(11)
    ]
    assert statuses == [401] * 10 + [429]  # the default: 10 a minute per client address


def test_a_burst_of_reset_requests_with_spoofed_addresses_is_limited(client, app):
    make_user("ann@example.com")
    statuses = [
        client.post(
            "/me/password-reset",
            json={"email": f"n{n}@example.com"},
            headers=SPOOFS["all"](n),
        ).status_code
        for n in range(6)
    ]
    assert statuses == [202] * 5 + [429]  # the default: 5 an hour per client address


def test_a_burst_of_vote_submissions_with_spoofed_addresses_is_limited(client, app):
    make_location("harbour", email="votes@harbour.example")
    body = {**VOTE_FIELDS, "voteBody": "Fine"}
    body.pop("yourPosition")
    statuses = [
        client.post(
            "/locations/harbour/votes/submit/btoc", json=body, headers=SPOOFS["all"](n)
        ).status_code
        for n in range(11)
    ]
    assert statuses == [202] * 10 + [429]
    assert len(queued_mail()) == 10


def test_behind_one_proxy_only_the_address_it_appends_counts(app_factory):
    app = app_factory(RATELIMIT_LOGIN_PER_IP="3/minute", PROXY_FIX_X_FOR=1)
    client = app.test_client()
    statuses = [
        login(
            client,
            f"guess{n}@example.com",
            headers={"X-Forwarded-For": f"198.51.100.{n}, 203.0.113.9"},
        ).status_code
        for n in range(4)
    ]
    assert statuses == [401, 401, 401, 429]


# --- 14. the session store ------------------------------------------------------------------
# Whoever can write to the sessions' Redis (or the session folder) must not run code in the
# service, and a copy of the store must not sign anyone in.


class Planted:
    """A pickle that, once loaded, makes a folder: proof that the store ran code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.mkdir, (self.marker,))


def plant(app, store_id: str, raw: bytes) -> None:
    """Write `raw` as the stored value of `store_id`, as an attacker with the store would."""
    import struct

    interface = app.session_interface
    if hasattr(interface, "client") and not hasattr(interface, "cache"):
        interface.client.set(store_id, raw, ex=600)
    else:
        with open(interface.cache._get_filename(store_id), "wb") as file:
            file.write(struct.pack("I", 0) + raw)  # cachelib's header: no expiry


def stored_ids(app) -> list[str]:
    """What a copy of the store shows: the Redis keys, or the session file names."""
    import os

    interface = app.session_interface
    if hasattr(interface, "cache"):  # without cachelib's own count file
        return [
            name for name in os.listdir(interface.cache._path) if not interface.cache._is_mgmt(name)
        ]
    return [
        key.decode().removeprefix(interface.key_prefix)
        for key in interface.client.scan_iter(f"{interface.key_prefix}*")
    ]


@pytest.fixture(params=["configured", "files"])
def store_app(request, app, app_factory):
    """The suite's store (Redis under TEST_REDIS_URL, else files), and the file store."""
    return app if request.param == "configured" else app_factory(SESSION_TYPE="cachelib")


@pytest.mark.parametrize("under", ["its store id", "the bare session id"])
def test_a_pickle_planted_in_the_session_store_is_never_run(store_app, tmp_path, under):
    import pickle

    with store_app.app_context():
        make_user("ann@example.com")
    client = signed_in(store_app, "ann@example.com")
    sid = session_cookie(client)
    interface = store_app.session_interface
    bare = interface.key_prefix + sid
    store_id = interface._get_store_id(sid) if under == "its store id" else bare
    marker = tmp_path / "ran"
    plant(store_app, store_id, pickle.dumps(Planted(str(marker))))

    if under == "its store id":
        assert_problem(client.get("/me/"), 401)  # no session, so nobody
        assert login(client, "ann@example.com").status_code == 200  # a fresh sign-in works
    else:  # where the store kept sessions before: nothing reads it now
        assert client.get("/me/").get_json()["email"] == "ann@example.com"
    assert not marker.exists()


def plant_sealed(app, store_id: str, payload: bytes) -> None:
    """Store `payload` under `store_id` sealed as the service seals it (as if with its key):
    what reaches the decoder past the seal."""
    interface = app.session_interface
    sealed = b"v1." + interface._mac(store_id, payload) + b"." + payload
    if hasattr(interface, "cache"):
        sealed = json.dumps(sealed.decode()).encode()  # the file store keeps it as JSON text
    plant(app, store_id, sealed)


def stored_session(app, client) -> dict:
    interface = app.session_interface
    return interface._retrieve_session_data(interface._get_store_id(session_cookie(client)))


@pytest.mark.parametrize(
    "raw",
    [b"\x81\xa8_user_id\xa3abc", b"[1, 2]", b'"text"', b"{not json", b"", b"\x00" * 64],
    ids=["msgpack", "array", "string", "broken", "empty", "zeros"],
)
def test_a_stored_session_not_sealed_by_the_service_is_no_session(store_app, raw):
    with store_app.app_context():
        make_user("ann@example.com")
    client = signed_in(store_app, "ann@example.com")
    plant(store_app, store_app.session_interface._get_store_id(session_cookie(client)), raw)
    assert_problem(client.get("/me/"), 401)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"_touched": "x", "_user_id": "%s"}',
        b'{"_user_id": ["%s"]}',
        b'{"_signed_in": true, "_user_id": "%s"}',
        b'{"_permanent": 1, "_user_id": "%s"}',
        b"[" * 100_000 + b"]" * 100_000,
        b"[1, 2]",
    ],
    ids=["touched-text", "user-list", "signed-in-bool", "permanent-int", "deep", "array"],
)
def test_a_sealed_session_of_the_wrong_shape_is_no_session_never_a_500(store_app, payload):
    with store_app.app_context():
        make_user("ann@example.com")
    client = signed_in(store_app, "ann@example.com")
    token = stored_session(store_app, client)["_user_id"]
    store_id = store_app.session_interface._get_store_id(session_cookie(client))
    plant_sealed(store_app, store_id, payload.replace(b"%s", token.encode()))
    assert_problem(client.get("/me/"), 401)


def test_whoever_can_write_the_store_cannot_become_another_user(store_app):
    """The attacker signs in, finds their own key (they can write the store, so they can
    read it), and writes the victim's session into it: plain, or moved sealed."""
    with store_app.app_context():
        make_user("victim@example.com", is_super=True)
        make_user("mallory@example.com")
    victim = signed_in(store_app, "victim@example.com")
    mallory = signed_in(store_app, "mallory@example.com")
    interface = store_app.session_interface
    victims_session = stored_session(store_app, victim)
    own_key = interface._get_store_id(session_cookie(mallory))
    victims_key = interface._get_store_id(session_cookie(victim))

    plant(store_app, own_key, json.dumps(victims_session).encode())  # written plain
    assert_problem(mallory.get("/me/"), 401)

    raw = interface.client.get(victims_key) if not hasattr(interface, "cache") else None
    if raw is None:  # the file store: the file's JSON text, behind cachelib's header
        with open(interface.cache._get_filename(victims_key), "rb") as file:
            raw = file.read()[4:]
    plant(store_app, own_key, raw)  # the victim's sealed value, moved to another key
    assert_problem(mallory.get("/me/"), 401)
    assert victim.get("/me/").get_json()["email"] == "victim@example.com"  # theirs stands


def test_a_copy_of_the_session_store_holds_no_working_cookie(store_app):
    with store_app.app_context():
        for n in range(5):
            make_user(f"user{n}@example.com")
    clients = [signed_in(store_app, f"user{n}@example.com") for n in range(5)]
    cookies = {session_cookie(client) for client in clients}
    found = stored_ids(store_app)
    assert len(found) >= 5
    assert not cookies & set(found)
    for value in found:
        stranger = store_app.test_client()
        stranger.set_cookie(COOKIE, value)
        assert_problem(stranger.get("/me/"), 401)
    assert all(client.get("/me/").status_code == 200 for client in clients)  # the real ones work


def test_the_file_store_still_counts_its_files_and_prunes_past_its_threshold(app_factory):
    """cachelib keeps a count of its files beside the sessions, through the same serializer."""
    app = app_factory(SESSION_TYPE="cachelib", SESSION_FILE_THRESHOLD=3)
    with app.app_context():
        for n in range(6):
            make_user(f"user{n}@example.com")
    clients = [signed_in(app, f"user{n}@example.com") for n in range(6)]
    cache = app.session_interface.cache
    assert 1 <= cache._file_count <= 4
    assert len(stored_ids(app)) <= 4  # pruned as it went, oldest first
    assert clients[-1].get("/me/").status_code == 200  # the newest session is kept


def test_the_file_store_s_count_is_json_from_its_first_write(app_factory, caplog):
    """The count cachelib writes on opening the folder is JSON too: read back as a number,
    with no warning of a stored value that is not JSON."""
    app = app_factory(SESSION_TYPE="cachelib")
    cache = app.session_interface.cache
    with open(cache._get_filename(cache._fs_count_file), "rb") as count:
        assert json.loads(count.read()[4:]) == 0  # after the expiry cachelib writes first
    with app.app_context():
        make_user("ann@example.com")
    signed_in(app, "ann@example.com")
    assert cache._file_count == 1
    assert "not JSON" not in caplog.text


def test_a_session_stored_under_its_bare_id_before_the_upgrade_has_ended(store_app):
    """Sessions from before keyed store ids and seals are not found: they end, nothing
    breaks. (Before, JSON under the bare id was read: Flask-Session decodes JSON too.)"""
    with store_app.app_context():
        make_user("ann@example.com")
    live = stored_session(store_app, signed_in(store_app, "ann@example.com"))
    old = store_app.session_interface.key_prefix + "old-session-id"
    plant(store_app, old, json.dumps(live).encode())
    client = store_app.test_client()
    client.set_cookie(COOKIE, "old-session-id")
    assert_problem(client.get("/me/"), 401)
