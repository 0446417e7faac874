"""/locations/:slug/owners and …/admins: supers manage owners, owners (and supers) admins."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from directory_api import credentials
from directory_api.credentials import hash_token
from directory_api.models import GrantedRole, Membership, Role, RoleGrant, User
from directory_api.platform.extensions import db

from .conftest import (
    PROBLEM,
    Clock,
    invite,
    link_in,
    queued_mail,
    register,
    send_outbox,
    signed_in,
)
from .factories import grant, make_location, make_user, make_vote, save

FRONTEND = "http://localhost:3000"
NEW_PASSWORD = "a long passphrase"
INVITATION_SUBJECT = "You are invited to the Directory"
OFFER_SUBJECT = "You are offered a new role in the Directory"
ROLES = ["owner", "admin"]

# Every endpoint, with a request that succeeds for an allowed caller; "{id}" is a member.
ENDPOINTS = {
    "list": ("GET", "/", None, 200),
    "get": ("GET", "/id/{id}", None, 200),
    "invite": ("POST", "/", {"email": "new@example.com"}, 201),
    "update": ("PUT", "/id/{id}", {"name": "Renamed"}, 200),
    "remove": ("DELETE", "/id/{id}", None, 204),
}


@pytest.fixture
def locations(app):
    """Harbour and Bay, for the shared world."""
    return {
        "harbour": make_location("harbour", name="Harbour"),
        "bay": make_location("bay", name="Bay"),
    }


def member(email: str, location, role: str, **fields) -> User:
    user = make_user(email, **fields)
    grant(user, location, Role(role))
    return user


def call(client, role: str, endpoint: str, user_id, slug: str = "harbour"):
    method, suffix, body, _ = ENDPOINTS[endpoint]
    path = f"/locations/{slug}/{role}s" + suffix.format(id=user_id)
    return client.open(path, method=method, json=body)


def role_at(user_id, location) -> str | None:
    db.session.rollback()
    membership = db.session.get(Membership, (user_id, location.id))
    return membership.role.value if membership else None


def user_by_email(email: str) -> User | None:
    db.session.rollback()
    return User.query.filter_by(email=email).one_or_none()


def invitation_link(address: str) -> tuple[str, str]:
    """The user id and token of the latest invitation queued to `address`."""
    return invitation_link_in(queued_mail(address)[-1])


def invitation_link_in(mail) -> tuple[str, str]:
    assert mail.subject == INVITATION_SUBJECT
    user_id, _, token = link_in(mail.body, f"{FRONTEND}/register/").partition("?token=")
    assert token
    return user_id, token


def assert_nothing_changed(target: User, role: str, location) -> None:
    assert user_by_email("new@example.com") is None
    assert role_at(target.id, location) == role
    assert db.session.get(User, target.id).name == "Target"
    assert queued_mail() == []


# --- callers --------------------------------------------------------------------------------
# Who may call what (every 401 and 403, and that a refused call changes nothing) is
# test_role_matrix.py's; these are the callers that succeed.

ALLOWED = [("owner", "super"), ("admin", "super"), ("admin", "owner")]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("role", ROLES)
def test_unknown_location_is_404(world, clients, role, endpoint):
    target = member("target@example.com", world["harbour"], role, name="Target")
    response = call(clients["super"], role, endpoint, target.id, slug="nowhere")
    assert response.status_code == 404
    assert response.mimetype == PROBLEM
    assert_nothing_changed(target, role, world["harbour"])


# --- one member -----------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["get", "update", "remove"])
@pytest.mark.parametrize(
    ("role", "who"),
    [
        ("owner", "plain"),  # holds no role at all
        ("owner", "admin"),  # holds the other role here
        ("owner", "other_owner"),  # holds this role at another location
        ("admin", "plain"),
        ("admin", "owner"),
        ("admin", "other_admin"),
    ],
)
def test_a_user_without_that_role_here_is_404(world, clients, role, who, endpoint):
    user = world[who]
    before = {(m.location_id, m.role) for m in user.memberships}
    response = call(clients["super"], role, endpoint, user.id)
    assert response.status_code == 404
    assert response.mimetype == PROBLEM
    user = user_by_email(user.email)
    assert {(m.location_id, m.role) for m in user.memberships} == before
    assert user.name != "Renamed"


@pytest.mark.parametrize("user_id", [str(uuid.uuid4()), "123", "not-a-uuid"])
@pytest.mark.parametrize("role", ROLES)
def test_unknown_or_malformed_id_is_404(clients, role, user_id):
    response = clients["super"].get(f"/locations/harbour/{role}s/id/{user_id}")
    assert response.status_code == 404
    assert response.mimetype == PROBLEM


@pytest.mark.parametrize("role", ROLES)
def test_get_one_member_with_this_locations_role(world, clients, role):
    target = member("target@example.com", world["harbour"], role, name="Target")
    response = clients["super"].get(f"/locations/harbour/{role}s/id/{target.id}")
    assert response.status_code == 200
    body = response.get_json()
    assert body["id"] == str(target.id)
    assert (body["email"], body["name"], body["status"]) == (
        "target@example.com",
        "Target",
        "active",
    )
    assert body["roles"] == [{"location": "harbour", "role": role}]
    assert not {"passwordHash", "password_hash", "sessionToken", "token"} & set(body)


# --- lists ----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_list_shows_this_locations_members_sorted_by_email_and_paged(world, clients, role):
    for email in ("zed@example.com", "amy@example.com", "max@example.com"):
        member(email, world["harbour"], role)
    member("bay@example.com", world["bay"], role)  # same role, other location
    client = clients["super"]
    response = client.get(f"/locations/harbour/{role}s/?perPage=2")
    assert response.status_code == 200
    body = response.get_json()
    expected = sorted(
        ["zed@example.com", "amy@example.com", "max@example.com", f"{role}@example.com"]
    )
    assert [u["email"] for u in body["items"]] == expected[:2]
    assert (body["page"], body["perPage"], body["total"]) == (1, 2, 4)
    assert 'rel="next"' in response.headers["Link"]
    second = client.get(f"/locations/harbour/{role}s/?perPage=2&page=2").get_json()
    assert [u["email"] for u in second["items"]] == expected[2:]
    for item in body["items"] + second["items"]:
        assert item["roles"] == [{"location": "harbour", "role": role}]


def test_owner_lists_admins_of_their_location(clients):
    response = clients["owner"].get("/locations/harbour/admins/")
    assert response.status_code == 200
    assert [u["email"] for u in response.get_json()["items"]] == ["admin@example.com"]


# --- roles seen through a location ----------------------------------------------------------


def test_roles_seen_through_a_location_show_only_that_location(world, clients):
    twice = member("twice@example.com", world["harbour"], "admin")
    grant(twice, world["bay"], Role.ADMIN)
    client = clients["super"]
    one = client.get(f"/locations/harbour/admins/id/{twice.id}").get_json()
    assert one["roles"] == [{"location": "harbour", "role": "admin"}]
    other = client.get(f"/locations/bay/admins/id/{twice.id}").get_json()
    assert other["roles"] == [{"location": "bay", "role": "admin"}]
    listed = client.get("/locations/harbour/admins/").get_json()["items"]
    assert [u["roles"] for u in listed if u["email"] == "twice@example.com"] == [
        [{"location": "harbour", "role": "admin"}]
    ]


def test_an_owner_does_not_see_a_members_roles_elsewhere(world, clients):
    twice = member("twice@example.com", world["harbour"], "admin")
    grant(twice, world["bay"], Role.OWNER)
    response = clients["owner"].get(f"/locations/harbour/admins/id/{twice.id}")
    assert response.status_code == 200
    assert "bay" not in response.get_data(as_text=True)


def test_me_shows_every_role_of_the_user(app, world):
    twice = member("twice@example.com", world["harbour"], "admin")
    grant(twice, world["bay"], Role.ADMIN)
    roles = signed_in(app, "twice@example.com").get("/me/").get_json()["roles"]
    assert roles == [
        {"location": "bay", "role": "admin"},
        {"location": "harbour", "role": "admin"},
    ]


# --- invitations ----------------------------------------------------------------------------


@pytest.mark.parametrize(("role", "caller"), ALLOWED)
def test_invite_unknown_email_creates_an_invited_member(world, clients, role, caller):
    response = clients[caller].post(
        f"/locations/harbour/{role}s/", json={"email": "New@Example.com", "name": "Nia"}
    )
    assert response.status_code == 201
    body = response.get_json()
    assert (body["email"], body["name"], body["status"]) == ("new@example.com", "Nia", "invited")
    assert body["isSuper"] is False
    assert body["roles"] == [{"location": "harbour", "role": role}]
    assert response.headers["Location"] == f"/locations/harbour/{role}s/id/{body['id']}"
    user = user_by_email("new@example.com")
    assert str(user.id) == body["id"]
    assert user.password_hash is None
    assert role_at(user.id, world["harbour"]) == role
    assert Membership.query.filter_by(user_id=user.id).count() == 1


@pytest.mark.parametrize("role", ROLES)
def test_invitation_mail_links_to_register_with_the_user_id(clients, role):
    response = clients["super"].post(
        f"/locations/harbour/{role}s/", json={"email": "new@example.com"}
    )
    [mail] = queued_mail("new@example.com")
    assert mail.subject == INVITATION_SUBJECT
    assert f"{role} of Harbour" in mail.body
    user_id, token = invitation_link("new@example.com")
    assert user_id == response.get_json()["id"]
    assert token not in response.get_data(as_text=True)
    assert "token" not in response.get_data(as_text=True).lower()


@pytest.mark.parametrize(("role", "caller"), ALLOWED)
def test_invite_existing_active_user_offers_the_role_until_they_accept(
    app, world, clients, role, caller
):
    ann = make_user("ann@example.com", name="Ann", phone="+44 1")
    grant(ann, world["bay"], Role.ADMIN)
    hidden = make_vote(world["harbour"])  # inactive: only those with access see it
    ann_client = signed_in(app, "ann@example.com")
    inviter = clients[caller]
    response = inviter.post(
        f"/locations/harbour/{role}s/", json={"email": "ANN@example.com", "name": "Not Ann"}
    )
    assert response.status_code == 201
    # Only what the inviter knew, and the account's status: no name, phone, roles, login.
    assert response.get_json() == {
        "id": str(ann.id),
        "email": "ann@example.com",
        "status": "active",
    }
    assert "Location" not in response.headers  # nothing to point at until accepted
    # A pending grant is not a role: not held, not listed, no access.
    assert role_at(ann.id, world["harbour"]) is None
    assert user_by_email("ann@example.com").name == "Ann"
    listed = inviter.get(f"/locations/harbour/{role}s/").get_json()["items"]
    assert "ann@example.com" not in [u["email"] for u in listed]
    assert inviter.get(f"/locations/harbour/{role}s/id/{ann.id}").status_code == 404
    assert ann_client.get("/me/").get_json()["roles"] == [{"location": "bay", "role": "admin"}]
    assert ann_client.get(f"/locations/harbour/votes/id/{hidden.id}").status_code == 404
    [mail] = queued_mail("ann@example.com")
    assert mail.subject == OFFER_SUBJECT
    assert f"{role} of Harbour" in mail.body
    assert "/register/" not in mail.body
    token = link_in(mail.body, f"{FRONTEND}/roles/accept/")
    assert len(token) >= 22 and token not in response.get_data(as_text=True)

    accepted = ann_client.post(f"/me/roles/accept/{token}")
    assert accepted.status_code == 200
    assert accepted.get_json() == ann_client.get("/me/").get_json()
    assert accepted.get_json()["roles"] == [
        {"location": "bay", "role": "admin"},
        {"location": "harbour", "role": role},
    ]
    assert role_at(ann.id, world["harbour"]) == role
    assert ann_client.get(f"/locations/harbour/votes/id/{hidden.id}").status_code == 200
    listed = inviter.get(f"/locations/harbour/{role}s/").get_json()["items"]
    assert "ann@example.com" in [u["email"] for u in listed]
    assert User.query.filter_by(email="ann@example.com").count() == 1


def test_invite_existing_admin_as_owner_promotes_them_once_they_accept(world, clients):
    admin = world["admin"]
    client = clients["super"]
    response = client.post("/locations/harbour/owners/", json={"email": "admin@example.com"})
    assert response.status_code == 201
    assert set(response.get_json()) == {"id", "email", "status"}
    assert role_at(admin.id, world["harbour"]) == "admin"  # still only an admin
    assert client.get(f"/locations/harbour/owners/id/{admin.id}").status_code == 404
    [mail] = queued_mail("admin@example.com")
    assert mail.subject == OFFER_SUBJECT
    token = link_in(mail.body, "/roles/accept/")
    accepted = clients["admin"].post(f"/me/roles/accept/{token}")
    assert accepted.status_code == 200
    assert accepted.get_json()["roles"] == [{"location": "harbour", "role": "owner"}]
    assert Membership.query.filter_by(user_id=admin.id).count() == 1
    assert role_at(admin.id, world["harbour"]) == "owner"
    # No longer listed as an admin, now listed as an owner.
    assert client.get(f"/locations/harbour/admins/id/{admin.id}").status_code == 404
    assert client.get(f"/locations/harbour/owners/id/{admin.id}").status_code == 200


@pytest.mark.parametrize(
    ("held", "offered", "caller"),
    [
        ("owner", "admin", "super"),  # an owner is never demoted by an invitation
        ("owner", "admin", "owner"),
        ("owner", "owner", "super"),  # already holds the role
        ("admin", "admin", "super"),
    ],
)
def test_inviting_someone_who_holds_that_role_or_a_higher_one_is_409(
    world, clients, held, offered, caller
):
    holder = member("holder@example.com", world["harbour"], held)
    response = clients[caller].post(
        f"/locations/harbour/{offered}s/", json={"email": "holder@example.com"}
    )
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    assert role_at(holder.id, world["harbour"]) == held
    assert Membership.query.filter_by(user_id=holder.id).count() == 1
    assert queued_mail() == []


@pytest.mark.parametrize("role", ROLES)
def test_invite_member_of_another_location_adds_a_second_role_once_accepted(
    app, world, clients, role
):
    holder = member("holder@example.com", world["bay"], role)
    response = clients["super"].post(
        f"/locations/harbour/{role}s/", json={"email": "holder@example.com"}
    )
    assert response.status_code == 201
    assert "bay" not in response.get_data(as_text=True)
    assert (role_at(holder.id, world["bay"]), role_at(holder.id, world["harbour"])) == (role, None)
    token = link_in(queued_mail("holder@example.com")[0].body, "/roles/accept/")
    accepted = signed_in(app, "holder@example.com").post(f"/me/roles/accept/{token}")
    assert accepted.status_code == 200
    assert (role_at(holder.id, world["bay"]), role_at(holder.id, world["harbour"])) == (role, role)


def test_reinviting_an_active_user_replaces_the_offer(app, clients):
    make_user("ann@example.com")
    owner = clients["owner"]
    for _ in range(2):
        response = owner.post("/locations/harbour/admins/", json={"email": "ann@example.com"})
        assert response.status_code == 201
    first, second = (
        link_in(mail.body, "/roles/accept/") for mail in queued_mail("ann@example.com")
    )
    ann = signed_in(app, "ann@example.com")
    assert ann.post(f"/me/roles/accept/{first}").status_code == 404
    assert ann.post(f"/me/roles/accept/{second}").status_code == 200
    assert ann.get("/me/").get_json()["roles"] == [{"location": "harbour", "role": "admin"}]


def test_offers_for_other_places_wait_side_by_side(app, world, clients):
    ann = make_user("ann@example.com")
    boss = clients["super"]
    assert (
        boss.post("/locations/harbour/admins/", json={"email": "ann@example.com"}).status_code
        == 201
    )
    assert boss.post("/locations/bay/owners/", json={"email": "ann@example.com"}).status_code == 201
    tokens = [link_in(mail.body, "/roles/accept/") for mail in queued_mail("ann@example.com")]
    ann_client = signed_in(app, "ann@example.com")
    assert [ann_client.post(f"/me/roles/accept/{t}").status_code for t in tokens] == [200, 200]
    assert (role_at(ann.id, world["harbour"]), role_at(ann.id, world["bay"])) == ("admin", "owner")


def test_an_invited_account_is_offered_a_new_role_too_and_shown_to_nobody(app, world, clients):
    """Not registered yet, it is still an account: another inviter gets an offer pending
    its consent, learns nothing about it, and cannot read it through the role."""
    boss = clients["super"]
    first = boss.post("/locations/bay/owners/", json={"email": "new@example.com", "name": "Nia"})
    assert first.status_code == 201
    user_id = first.get_json()["id"]
    owner = clients["owner"]
    response = owner.post(
        "/locations/harbour/admins/", json={"email": "new@example.com", "name": "Other"}
    )
    assert response.status_code == 201
    assert response.get_json() == {"id": user_id, "email": "new@example.com", "status": "invited"}
    assert "Location" not in response.headers
    assert role_at(uuid.UUID(user_id), world["harbour"]) is None
    assert owner.get(f"/locations/harbour/admins/id/{user_id}").status_code == 404
    assert user_by_email("new@example.com").name == "Nia"
    assert [m.subject for m in queued_mail("new@example.com")] == [
        INVITATION_SUBJECT,
        OFFER_SUBJECT,
    ]
    # The super's invitation still works; it brings only the role it was for.
    _, token = invitation_link_in(queued_mail("new@example.com")[0])
    registered = app.test_client().post(
        f"/me/register/{user_id}", json={"token": token, "password": NEW_PASSWORD}
    )
    assert registered.status_code == 200
    assert registered.get_json()["roles"] == [{"location": "bay", "role": "owner"}]
    # Registered, the user may take up the offer.
    offer = link_in(queued_mail("new@example.com")[1].body, "/roles/accept/")
    accepted = signed_in(app, "new@example.com", NEW_PASSWORD).post(f"/me/roles/accept/{offer}")
    assert accepted.status_code == 200
    assert {"location": "harbour", "role": "admin"} in accepted.get_json()["roles"]


@pytest.mark.parametrize("role", ROLES)
def test_reinviting_an_invited_member_sends_a_new_link_and_voids_the_old(app, clients, role):
    client = clients["super"]
    client.post(f"/locations/harbour/{role}s/", json={"email": "new@example.com"})
    user_id, old_token = invitation_link("new@example.com")
    again = client.post(f"/locations/harbour/{role}s/", json={"email": "new@example.com"})
    assert again.status_code == 201
    assert again.get_json()["id"] == user_id
    assert len(queued_mail("new@example.com")) == 2
    _, new_token = invitation_link("new@example.com")
    assert new_token != old_token
    old = app.test_client().post(
        f"/me/register/{user_id}", json={"token": old_token, "password": NEW_PASSWORD}
    )
    assert old.status_code == 404
    new = app.test_client().post(
        f"/me/register/{user_id}", json={"token": new_token, "password": NEW_PASSWORD}
    )
    assert new.status_code == 200
    assert new.get_json()["roles"] == [{"location": "harbour", "role": role}]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "email"),
        ({"email": "not-an-address"}, "email"),
        ({"email": "new@example.com", "role": "owner"}, "role"),
        ({"email": "new@example.com", "isSuper": True}, "isSuper"),
    ],
)
@pytest.mark.parametrize("role", ROLES)
def test_invite_validation_is_422_naming_the_field(clients, role, body, field):
    response = clients["super"].post(f"/locations/harbour/{role}s/", json=body)
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert field in response.get_json()["errors"]
    assert user_by_email("new@example.com") is None
    assert queued_mail() == []


# --- pending offers (API.md 18) -------------------------------------------------------------
# Inviting an existing account offers it the role (a pending offer, API.md 9); whoever may
# make an offer lists and withdraws them, and an offer works only while its maker could
# still make it.

INVITER = {"owner": "super", "admin": "owner"}  # who makes each offer in these tests


def offer(client, role: str, email: str, slug: str = "harbour") -> str:
    """Offer `role` at `slug` to the account `email`; the token of the mailed link."""
    response = client.post(f"/locations/{slug}/{role}s/", json={"email": email})
    assert response.status_code == 201, response.get_json()
    assert "/roles/accept/" in queued_mail(email)[-1].body
    return link_in(queued_mail(email)[-1].body, "/roles/accept/")


def pending(client, role: str, slug: str = "harbour", **query) -> list[dict]:
    response = client.get(f"/locations/{slug}/{role}s/pending/", query_string=query)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["items"]


def pending_emails(client, role: str, slug: str = "harbour") -> list[str]:
    return [item["email"] for item in pending(client, role, slug)]


def withdraw(client, role: str, user_id, slug: str = "harbour"):
    return client.delete(f"/locations/{slug}/{role}s/pending/id/{user_id}")


def accept(app, email: str, token: str):
    return signed_in(app, email).post(f"/me/roles/accept/{token}")


def accept_latest(app, email: str):
    """Accept the offer of the latest mail to `email`."""
    return accept(app, email, link_in(queued_mail(email)[-1].body, "/roles/accept/"))


def instant(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(("role", "caller"), ALLOWED)
def test_pending_lists_live_offers_with_when_they_were_made_and_expire(
    app, world, clients, role, caller
):
    client = clients[caller]
    ann = make_user("ann@example.com")
    make_user("bob@example.com")
    make_user("cal@example.com")
    before = datetime.now(UTC)
    offer(client, role, "ann@example.com")
    used = offer(client, role, "bob@example.com")
    assert accept(app, "bob@example.com", used).status_code == 200
    offer(client, role, "cal@example.com")
    offer(client, role, "cal@example.com")  # replaces the first: one offer
    offer(clients["super"], role, "ann@example.com", slug="bay")  # another place
    other = "admin" if role == "owner" else "owner"
    offer(clients["super"], other, "plain@example.com")  # another role
    client.post(f"/locations/harbour/{role}s/", json={"email": "new@example.com"})  # a role

    items = pending(client, role)
    assert [item["email"] for item in items] == ["ann@example.com", "cal@example.com"]
    assert set(items[0]) == {"id", "email", "offeredAt", "expiresAt"}
    assert items[0]["id"] == str(ann.id)
    offered_at, expires_at = instant(items[0]["offeredAt"]), instant(items[0]["expiresAt"])
    assert before - timedelta(seconds=1) <= offered_at <= datetime.now(UTC)
    assert abs(expires_at - offered_at - timedelta(days=7)) < timedelta(seconds=1)
    assert pending_emails(clients["super"], role, "bay") == ["ann@example.com"]


def test_pending_is_a_list_like_the_others(app, world, clients):
    """Paged and sorted by email by default, `offeredAt` and `expiresAt` too (API.md 1)."""
    client = clients["owner"]
    for name in ("zed", "amy", "max"):
        make_user(f"{name}@example.com")
        offer(client, "admin", f"{name}@example.com")
    response = client.get("/locations/harbour/admins/pending/?perPage=2")
    body = response.get_json()
    assert [item["email"] for item in body["items"]] == ["amy@example.com", "max@example.com"]
    assert (body["page"], body["perPage"], body["total"]) == (1, 2, 3)
    assert 'rel="next"' in response.headers["Link"]
    second = client.get("/locations/harbour/admins/pending/?perPage=2&page=2").get_json()
    assert [item["email"] for item in second["items"]] == ["zed@example.com"]
    newest_first = [item["email"] for item in pending(client, "admin", sort="-offeredAt")]
    assert newest_first == ["max@example.com", "amy@example.com", "zed@example.com"]
    assert pending(client, "admin", sort="expiresAt")[0]["email"] == "zed@example.com"
    for query in ("sort=password", "perPage=0", "role=admin"):
        refused = client.get(f"/locations/harbour/admins/pending/?{query}")
        assert refused.status_code == 422, query
        assert refused.mimetype == PROBLEM


@pytest.mark.parametrize("role", ROLES)
def test_an_expired_offer_is_neither_listed_nor_accepted(app, world, clients, role, monkeypatch):
    make_user("ann@example.com")
    token = offer(clients[INVITER[role]], role, "ann@example.com")
    clock = Clock()
    clock.advance(days=7, seconds=1)
    monkeypatch.setattr(credentials, "utcnow", clock)
    assert pending_emails(clients["super"], role) == []
    assert withdraw(clients["super"], role, user_by_email("ann@example.com").id).status_code == 404
    assert accept(app, "ann@example.com", token).status_code == 404


@pytest.mark.parametrize(("role", "caller"), ALLOWED)
def test_a_withdrawn_offer_no_longer_works(app, world, clients, role, caller):
    ann = make_user("ann@example.com")
    client = clients[caller]
    token = offer(client, role, "ann@example.com")
    elsewhere = offer(clients["super"], role, "ann@example.com", slug="bay")

    response = withdraw(client, role, ann.id)
    assert response.status_code == 204
    assert response.data == b""
    assert pending_emails(client, role) == []
    refused = accept(app, "ann@example.com", token)
    assert refused.status_code == 404
    assert refused.mimetype == PROBLEM
    assert role_at(ann.id, world["harbour"]) is None
    again = withdraw(client, role, ann.id)
    assert again.status_code == 404
    assert again.mimetype == PROBLEM
    # The offer of another place is another offer.
    assert pending_emails(clients["super"], role, "bay") == ["ann@example.com"]
    assert accept(app, "ann@example.com", elsewhere).status_code == 200
    assert role_at(ann.id, world["bay"]) == role


@pytest.mark.parametrize("role", ROLES)
def test_withdrawing_what_is_no_live_offer_is_404(app, world, clients, role):
    client = clients["super"]
    ann = make_user("ann@example.com")
    accepted = offer(client, role, "ann@example.com")
    assert accept(app, "ann@example.com", accepted).status_code == 200
    for user_id in (ann.id, world["plain"].id, uuid.uuid4(), "not-a-uuid"):
        response = withdraw(client, role, user_id)
        assert response.status_code == 404, user_id
        assert response.mimetype == PROBLEM
    assert role_at(ann.id, world["harbour"]) == role  # an accepted offer is a role now
    assert withdraw(client, role, world["plain"].id, slug="nowhere").status_code == 404


def remove_owner(app, clients, owner: User) -> None:
    assert clients["super"].delete(f"/locations/harbour/owners/id/{owner.id}").status_code == 204


def demote_to_admin(app, clients, owner: User) -> None:
    """Harbour's owner becomes one of its admins (owner includes admin: removed, then
    offered the admin role, which they accept)."""
    remove_owner(app, clients, owner)
    offer(clients["super"], "admin", owner.email)
    assert accept_latest(app, owner.email).status_code == 200


@pytest.mark.parametrize("loses_ownership", [remove_owner, demote_to_admin])
def test_an_owners_admin_offer_is_void_once_they_are_no_longer_an_owner_there(
    app, world, clients, loses_ownership
):
    ann = make_user("ann@example.com")
    token = offer(clients["owner"], "admin", "ann@example.com")
    assert pending_emails(clients["super"], "admin") == ["ann@example.com"]

    loses_ownership(app, clients, world["owner"])
    assert pending_emails(clients["super"], "admin") == []
    assert withdraw(clients["super"], "admin", ann.id).status_code == 404
    refused = accept(app, "ann@example.com", token)
    assert refused.status_code == 404
    assert refused.mimetype == PROBLEM
    assert role_at(ann.id, world["harbour"]) is None
    # Someone who may offer it now can, and that offer works.
    fresh = offer(clients["super"], "admin", "ann@example.com")
    assert accept(app, "ann@example.com", fresh).status_code == 200
    assert role_at(ann.id, world["harbour"]) == "admin"


def test_offers_keep_working_while_their_maker_may_still_make_them(app, world, clients):
    """Another owner leaving, an owner who is also a super leaving, a super's offer at a
    location whose owner leaves: none of it voids an offer."""
    member("olive@example.com", world["harbour"], "owner")
    olive_client = signed_in(app, "olive@example.com")
    for name in "abc":
        make_user(f"{name}@example.com")
    by_olive = offer(olive_client, "admin", "a@example.com")
    by_owner = offer(clients["owner"], "admin", "b@example.com")
    by_super = offer(clients["super"], "owner", "c@example.com")
    # The first owner becomes a super, then leaves harbour; olive stays.
    assert clients["super"].post("/supers/", json={"email": "owner@example.com"}).status_code == 201
    assert accept_latest(app, "owner@example.com").status_code == 200
    remove_owner(app, clients, world["owner"])

    assert pending_emails(olive_client, "admin") == ["a@example.com", "b@example.com"]
    assert pending_emails(clients["super"], "owner") == ["c@example.com"]
    for email, token in (
        ("a@example.com", by_olive),
        ("b@example.com", by_owner),
        ("c@example.com", by_super),
    ):
        assert accept(app, email, token).status_code == 200, email
    held = [role_at(user_by_email(f"{n}@example.com").id, world["harbour"]) for n in "abc"]
    assert held == ["admin", "admin", "owner"]


@pytest.mark.parametrize("role", ROLES)
def test_an_offer_made_before_makers_were_recorded_works_until_it_expires(
    app, world, clients, role
):
    """Offers stored before migration 0014 name no maker: they stay valid, at most 7 days."""
    ann, bob = make_user("ann@example.com"), make_user("bob@example.com")
    harbour = world["harbour"]
    now = datetime.now(UTC)
    for user, token, expires_at in (
        (ann, "a" * 43, now + timedelta(days=6)),
        (bob, "b" * 43, now - timedelta(seconds=1)),
    ):
        save(
            RoleGrant(
                user_id=user.id,
                location_id=harbour.id,
                role=GrantedRole(role),
                token_hash=hash_token(token),
                expires_at=expires_at,
                created_at=expires_at - timedelta(days=7),
            )
        )
    assert pending_emails(clients["super"], role) == ["ann@example.com"]
    assert accept(app, "bob@example.com", "b" * 43).status_code == 404
    assert accept(app, "ann@example.com", "a" * 43).status_code == 200
    assert role_at(ann.id, harbour) == role


# --- edits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("role", "caller"), ALLOWED)
def test_update_changes_name_and_phone(world, clients, role, caller):
    target = member("target@example.com", world["harbour"], role, name="Target")
    response = clients[caller].put(
        f"/locations/harbour/{role}s/id/{target.id}",
        json={"name": " Tia ", "phone": "+41 44 123 45 67"},
    )
    assert response.status_code == 200
    body = response.get_json()
    assert (body["name"], body["phone"]) == ("Tia", "+41 44 123 45 67")
    assert body["roles"] == [{"location": "harbour", "role": role}]
    user = user_by_email("target@example.com")
    assert (user.name, user.phone) == ("Tia", "+41 44 123 45 67")


@pytest.mark.parametrize(
    ("body", "field", "hint"),
    [
        ({"phone": "abc"}, "phone", None),
        ({"name": "x" * 201}, "name", None),
        ({"email": "changed@example.com"}, "email", "/me/email-update"),
        ({"password": "a long passphrase"}, "password", "/me/password-update"),
        ({"roles": []}, "roles", None),
    ],
)
@pytest.mark.parametrize("role", ROLES)
def test_update_validation_is_422_naming_the_field(world, clients, role, body, field, hint):
    target = member("target@example.com", world["harbour"], role, name="Target")
    response = clients["super"].put(f"/locations/harbour/{role}s/id/{target.id}", json=body)
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    messages = response.get_json()["errors"][field]
    if hint:
        assert hint in " ".join(messages)
    user = user_by_email("target@example.com")
    assert (user.name, user.phone, user.email) == ("Target", None, "target@example.com")


def rename_admin(client, target: User):
    return client.put(f"/locations/harbour/admins/id/{target.id}", json={"name": "Renamed"})


@pytest.mark.parametrize("role_elsewhere", ROLES)
def test_an_owner_may_not_edit_an_admin_who_has_a_role_elsewhere(world, clients, role_elsewhere):
    target = member("target@example.com", world["harbour"], "admin", name="Target")
    grant(target, world["bay"], Role(role_elsewhere))
    response = rename_admin(clients["owner"], target)
    assert response.status_code == 403
    assert response.mimetype == PROBLEM
    assert user_by_email("target@example.com").name == "Target"


def test_an_owner_may_not_edit_a_super(world, clients):
    target = member("target@example.com", world["harbour"], "admin", name="Target", is_super=True)
    response = rename_admin(clients["owner"], target)
    assert response.status_code == 403
    assert response.mimetype == PROBLEM
    assert user_by_email("target@example.com").name == "Target"


def test_an_owner_may_edit_an_admin_whose_every_role_is_at_their_locations(world, clients):
    cove = make_location("cove")
    grant(world["owner"], cove, Role.OWNER)
    target = member("target@example.com", world["harbour"], "admin", name="Target")
    grant(target, cove, Role.ADMIN)
    response = rename_admin(clients["owner"], target)
    assert response.status_code == 200
    assert user_by_email("target@example.com").name == "Renamed"


@pytest.mark.parametrize("who", ["other_admin", "other_owner", "super"])
def test_a_super_may_edit_anyone(world, clients, who):
    target = member("target@example.com", world["harbour"], "admin", name="Target")
    if who == "super":
        target.is_super = True
        db.session.commit()
    else:
        grant(target, world["bay"], Role(who.removeprefix("other_")))
    response = rename_admin(clients["super"], target)
    assert response.status_code == 200
    assert response.get_json()["name"] == "Renamed"


# --- removal --------------------------------------------------------------------------------


@pytest.mark.parametrize(("role", "caller"), ALLOWED)
def test_remove_takes_the_role_and_keeps_the_account(world, clients, role, caller):
    target = member("target@example.com", world["harbour"], role, name="Target")
    grant(target, world["bay"], Role.ADMIN)
    client = clients[caller]
    response = client.delete(f"/locations/harbour/{role}s/id/{target.id}")
    assert response.status_code == 204
    assert response.data == b""
    user = user_by_email("target@example.com")
    assert user is not None
    assert user.password_hash is not None
    assert role_at(target.id, world["harbour"]) is None
    assert role_at(target.id, world["bay"]) == "admin"  # other locations are untouched
    assert client.get(f"/locations/harbour/{role}s/id/{target.id}").status_code == 404
    assert client.delete(f"/locations/harbour/{role}s/id/{target.id}").status_code == 404


def test_a_removed_owner_loses_access_at_once(world, clients):
    owner_client = clients["owner"]
    assert owner_client.get("/locations/harbour/admins/").status_code == 200
    owner = world["owner"]
    removed = clients["super"].delete(f"/locations/harbour/owners/id/{owner.id}")
    assert removed.status_code == 204
    response = owner_client.get("/locations/harbour/admins/")
    assert response.status_code == 403
    assert response.mimetype == PROBLEM
    invite = owner_client.post("/locations/harbour/admins/", json={"email": "new@example.com"})
    assert invite.status_code == 403
    assert owner_client.get("/me/").get_json()["roles"] == []


def test_a_removed_admin_loses_the_role_at_once(world, clients):
    admin_client = clients["admin"]
    assert admin_client.get("/me/").get_json()["roles"] == [
        {"location": "harbour", "role": "admin"}
    ]
    admin = world["admin"]
    removed = clients["owner"].delete(f"/locations/harbour/admins/id/{admin.id}")
    assert removed.status_code == 204
    assert admin_client.get("/me/").get_json()["roles"] == []


# --- the whole way through SMTP -------------------------------------------------------------


def test_invited_owner_registers_from_the_delivered_mail(mail_app, mailbox):
    make_location("harbour", name="Harbour")
    make_user("super@example.com", is_super=True)
    invited = signed_in(mail_app, "super@example.com").post(
        "/locations/harbour/owners/", json={"email": "olive@example.com", "name": "Olive"}
    )
    assert invited.status_code == 201
    user_id = invited.get_json()["id"]
    early = mail_app.test_client().post(
        "/auth/login", json={"email": "olive@example.com", "password": NEW_PASSWORD}
    )
    assert early.status_code == 401  # invited, not registered yet

    send_outbox(mail_app)
    [message] = mailbox.to("olive@example.com")
    assert message["Subject"] == INVITATION_SUBJECT
    linked_id, _, token = link_in(message.get_content(), f"{FRONTEND}/register/").partition(
        "?token="
    )
    assert linked_id == user_id

    client = mail_app.test_client()
    registered = client.post(
        f"/me/register/{user_id}", json={"token": token, "password": NEW_PASSWORD}
    )
    assert registered.status_code == 200
    assert registered.get_json()["status"] == "active"
    me = client.get("/me/")
    assert me.status_code == 200
    assert me.get_json()["email"] == "olive@example.com"
    assert me.get_json()["roles"] == [{"location": "harbour", "role": "owner"}]
    assert client.get("/locations/harbour/admins/").status_code == 200
    # The token was single-use.
    again = mail_app.test_client().post(
        f"/me/register/{user_id}", json={"token": token, "password": "another passphrase"}
    )
    assert again.status_code == 404

    login = mail_app.test_client().post(
        "/auth/login", json={"email": "olive@example.com", "password": NEW_PASSWORD}
    )
    assert login.status_code == 200
    assert login.get_json()["roles"] == [{"location": "harbour", "role": "owner"}]


def test_removing_an_invited_members_only_role_voids_the_invitation(super_client, app):
    make_location("bay")
    user_id, token = invite(super_client, "new@example.com", "bay")
    assert super_client.delete(f"/locations/bay/owners/id/{user_id}").status_code == 204
    assert register(app.test_client(), user_id, token).status_code == 404


@pytest.mark.parametrize(
    ("who", "method", "path", "detail"),
    [
        # An admin at their own location: not "no role here", but who may.
        (
            "admin",
            "GET",
            "/locations/harbour/admins/",
            "Only an owner of this location (or a super) may do this.",
        ),
        (
            "plain",
            "GET",
            "/locations/harbour/votes/held/",
            "Only an owner or an admin of this location (or a super) may do this.",
        ),
        ("owner", "GET", "/locations/harbour/owners/", "Only a super may do this."),
        ("owner", "GET", "/supers/", "Only a super may do this."),
    ],
)
def test_a_403_says_who_may(world, clients, who, method, path, detail):
    response = clients[who].open(path, method=method)
    assert response.status_code == 403, response.get_json()
    assert response.headers["Content-Type"] == PROBLEM
    assert response.get_json()["detail"] == detail
