"""/supers: only supers see, invite, edit and revoke supers; the last active one stays."""

import uuid
from datetime import datetime, timedelta

import pytest

from directory_api.models import Role, User
from directory_api.platform.extensions import db

from .conftest import PROBLEM, link_in, queued_mail, signed_in
from .factories import grant, make_location, make_user

FRONTEND = "http://localhost:3000"
NEW_PASSWORD = "a long passphrase"
INVITATION_SUBJECT = "You are invited to the Directory"
OFFER_SUBJECT = "You are offered a new role in the Directory"


def user_by_email(email: str) -> User | None:
    db.session.rollback()
    return User.query.filter_by(email=email).one_or_none()


def invitation_link(address: str, frontend: str = FRONTEND) -> tuple[str, str]:
    """The user id and token of the latest invitation queued to `address`."""
    mail = queued_mail(address)[-1]
    assert mail.subject == INVITATION_SUBJECT
    user_id, _, token = link_in(mail.body, f"{frontend}/register/").partition("?token=")
    assert token
    return user_id, token


def register(app, user_id: str, token: str, password: str = NEW_PASSWORD):
    client = app.test_client()
    response = client.post(f"/me/register/{user_id}", json={"token": token, "password": password})
    return response, client


# Who may call what (401, 403, nothing changed) is test_role_matrix.py's.


@pytest.fixture
def other_super(app):
    return make_user("other@example.com", name="Other", is_super=True)


def test_list_shows_only_supers_sorted_by_email_and_paged(super_client, app):
    for email in ("zed@example.com", "amy@example.com", "max@example.com"):
        make_user(email, is_super=True)
    make_user("bob@example.com")  # not a super
    response = super_client.get("/supers/?perPage=2")
    assert response.status_code == 200
    body = response.get_json()
    assert [u["email"] for u in body["items"]] == ["amy@example.com", "max@example.com"]
    assert (body["page"], body["perPage"], body["total"]) == (1, 2, 4)
    assert all(u["isSuper"] is True for u in body["items"])
    assert 'rel="next"' in response.headers["Link"]
    second = super_client.get("/supers/?perPage=2&page=2").get_json()
    assert [u["email"] for u in second["items"]] == ["super@example.com", "zed@example.com"]


def test_list_sorts_by_request(super_client, app):
    make_user("amy@example.com", is_super=True)
    items = super_client.get("/supers/?sort=-email").get_json()["items"]
    assert [u["email"] for u in items] == ["super@example.com", "amy@example.com"]
    assert super_client.get("/supers/?sort=passwordHash").status_code == 422


def test_get_one_super_shows_the_user_without_secrets(super_client, app, other_super):
    response = super_client.get(f"/supers/id/{other_super.id}")
    assert response.status_code == 200
    body = response.get_json()
    assert body["id"] == str(other_super.id)
    assert body["email"] == "other@example.com"
    assert (body["isSuper"], body["status"], body["roles"]) == (True, "active", [])
    assert set(body) == {
        "id",
        "email",
        "name",
        "phone",
        "isSuper",
        "status",
        "roles",
        "createdAt",
        "lastLoginAt",
    }


def test_get_a_user_who_is_not_a_super_is_404(super_client, app, plain_user):
    response = super_client.get(f"/supers/id/{plain_user.id}")
    assert response.status_code == 404
    assert response.mimetype == PROBLEM


@pytest.mark.parametrize("user_id", [str(uuid.uuid4()), "123", "not-a-uuid"])
def test_unknown_or_malformed_id_is_404(super_client, app, user_id):
    response = super_client.get(f"/supers/id/{user_id}")
    assert response.status_code == 404
    assert response.mimetype == PROBLEM


def test_invite_unknown_email_creates_an_invited_super(super_client, app):
    response = super_client.post("/supers/", json={"email": "New@Example.com", "name": "Nia"})
    assert response.status_code == 201
    body = response.get_json()
    assert body["email"] == "new@example.com"
    assert body["name"] == "Nia"
    assert (body["isSuper"], body["status"], body["roles"]) == (True, "invited", [])
    assert response.headers["Location"] == f"/supers/id/{body['id']}"
    assert super_client.get(response.headers["Location"]).get_json()["id"] == body["id"]
    user = user_by_email("new@example.com")
    assert str(user.id) == body["id"]
    assert user.is_super is True
    assert user.password_hash is None


def test_invitation_mail_links_to_register_with_the_user_id(super_client, app):
    response = super_client.post("/supers/", json={"email": "new@example.com"})
    [mail] = queued_mail("new@example.com")
    assert mail.recipients == ["new@example.com"]
    assert mail.subject == INVITATION_SUBJECT
    assert "as a super" in mail.body
    user_id, token = invitation_link("new@example.com")
    assert user_id == response.get_json()["id"]
    assert len(token) >= 22  # at least 128 random bits


def test_invitation_link_is_built_from_frontend_url(app_factory):
    app = app_factory(FRONTEND_URL="https://admin.example.org/")
    with app.app_context():
        make_user("super@example.com", is_super=True)
        client = signed_in(app, "super@example.com")
        user_id = client.post("/supers/", json={"email": "new@example.com"}).get_json()["id"]
        assert invitation_link("new@example.com", "https://admin.example.org")[0] == user_id


def test_invite_response_holds_no_token_or_hash(super_client, app):
    response = super_client.post("/supers/", json={"email": "new@example.com"})
    _, token = invitation_link("new@example.com")
    text = response.get_data(as_text=True)
    assert token not in text
    for word in ("token", "hash", "password", "argon2"):
        assert word not in text.lower()


def test_invite_existing_active_user_offers_super_rights_until_accepted(super_client, app):
    ann = make_user("ann@example.com", name="Ann", phone="+44 1")
    grant(ann, make_location("harbour"), Role.ADMIN)
    response = super_client.post("/supers/", json={"email": "ANN@example.com", "name": "X"})
    assert response.status_code == 201
    assert response.get_json() == {
        "id": str(ann.id),
        "email": "ann@example.com",
        "status": "active",
    }
    assert "Location" not in response.headers
    assert User.query.filter_by(email="ann@example.com").count() == 1
    user = user_by_email("ann@example.com")
    assert (user.is_super, user.name) == (False, "Ann")
    listed = super_client.get("/supers/").get_json()["items"]
    assert [u["email"] for u in listed] == ["super@example.com"]
    assert super_client.get(f"/supers/id/{ann.id}").status_code == 404
    [mail] = queued_mail("ann@example.com")
    assert mail.subject == OFFER_SUBJECT
    assert "a super" in mail.body
    assert "/register/" not in mail.body
    token = link_in(mail.body, f"{FRONTEND}/roles/accept/")
    assert token not in response.get_data(as_text=True)

    accepted = signed_in(app, "ann@example.com").post(f"/me/roles/accept/{token}")
    assert accepted.status_code == 200
    assert (accepted.get_json()["isSuper"], accepted.get_json()["name"]) == (True, "Ann")
    assert user_by_email("ann@example.com").is_super is True
    assert super_client.get(f"/supers/id/{ann.id}").status_code == 200


def test_a_new_super_may_use_the_super_endpoints_once_they_accept(super_client, app):
    make_user("ann@example.com")
    ann_client = signed_in(app, "ann@example.com")
    assert ann_client.get("/supers/").status_code == 403
    super_client.post("/supers/", json={"email": "ann@example.com"})
    assert ann_client.get("/supers/").status_code == 403  # an offer grants nothing
    token = link_in(queued_mail("ann@example.com")[0].body, "/roles/accept/")
    accepted = signed_in(app, "ann@example.com").post(f"/me/roles/accept/{token}")
    assert accepted.status_code == 200
    assert ann_client.get("/supers/").status_code == 200  # the other session, at once


def test_super_rights_offered_to_an_active_user_are_theirs_to_accept(super_client, app):
    make_user("ann@example.com")
    make_user("bob@example.com", is_super=True)
    super_client.post("/supers/", json={"email": "ann@example.com"})
    token = link_in(queued_mail("ann@example.com")[0].body, "/roles/accept/")
    stolen = signed_in(app, "bob@example.com").post(f"/me/roles/accept/{token}")
    assert stolen.status_code == 404
    assert stolen.mimetype == PROBLEM
    assert user_by_email("ann@example.com").is_super is False
    assert signed_in(app, "ann@example.com").post(f"/me/roles/accept/{token}").status_code == 200
    assert user_by_email("ann@example.com").is_super is True


def test_an_invited_account_invited_as_super_is_offered_it(super_client, app):
    make_location("harbour")
    first = super_client.post(
        "/locations/harbour/owners/", json={"email": "new@example.com", "name": "Nia"}
    )
    response = super_client.post("/supers/", json={"email": "new@example.com", "name": "Other"})
    assert response.status_code == 201
    user_id = first.get_json()["id"]
    assert response.get_json() == {"id": user_id, "email": "new@example.com", "status": "invited"}
    assert "Location" not in response.headers
    user = user_by_email("new@example.com")
    assert (user.is_super, user.name) == (False, "Nia")
    assert "/roles/accept/" in queued_mail("new@example.com")[-1].body


def test_invite_existing_active_super_is_409(super_client, app, other_super):
    response = super_client.post("/supers/", json={"email": "other@example.com"})
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    assert queued_mail() == []


def test_reinviting_an_invited_super_sends_a_new_link_and_voids_the_old(super_client, app):
    first = super_client.post("/supers/", json={"email": "new@example.com"})
    user_id, old_token = invitation_link("new@example.com")
    again = super_client.post("/supers/", json={"email": "new@example.com"})
    assert again.status_code == 201
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.get_json()["status"] == "invited"
    assert len(queued_mail("new@example.com")) == 2
    same_id, new_token = invitation_link("new@example.com")
    assert same_id == user_id
    assert new_token != old_token

    refused, _ = register(app, user_id, old_token)
    assert refused.status_code == 404
    assert refused.mimetype == PROBLEM
    accepted, new_client = register(app, user_id, new_token)
    assert accepted.status_code == 200
    assert accepted.get_json()["status"] == "active"
    assert accepted.get_json()["isSuper"] is True
    assert new_client.get("/supers/").status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "email"),
        ({"email": "not-an-address"}, "email"),
        ({"email": "   "}, "email"),
        ({"email": "a" * 250 + "@example.com"}, "email"),
        ({"email": "new@example.com", "isSuper": True}, "isSuper"),
        ({"email": "new@example.com", "password": "a long passphrase"}, "password"),
        ({"email": "new@example.com", "name": "Line\nbreak"}, "name"),
    ],
)
def test_invite_validation_is_422_naming_the_field(super_client, app, body, field):
    response = super_client.post("/supers/", json=body)
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert field in response.get_json()["errors"]
    assert User.query.count() == 1  # only the calling super
    assert queued_mail() == []


# Pending offers of super rights (API.md 18): supers list and withdraw them, and an offer
# works only while its maker is a super (owner and admin offers: test_members.py).


def offer_super(client, email: str) -> str:
    """Offer super rights to the account `email`; the token of the mailed link."""
    assert client.post("/supers/", json={"email": email}).status_code == 201
    return link_in(queued_mail(email)[-1].body, "/roles/accept/")


def pending_supers(client) -> list[dict]:
    response = client.get("/supers/pending/")
    assert response.status_code == 200, response.get_json()
    return response.get_json()["items"]


def member_offer(client, plural: str, email: str) -> str:
    """Offer harbour's owner or admin role to the account `email`; the mailed token."""
    response = client.post(f"/locations/harbour/{plural}/", json={"email": email})
    assert response.status_code == 201, response.get_json()
    return link_in(queued_mail(email)[-1].body, "/roles/accept/")


def test_pending_super_offers_are_listed_and_withdrawn(super_client, app):
    ann = make_user("ann@example.com")
    make_user("bob@example.com")
    token = offer_super(super_client, "ann@example.com")
    accepted = offer_super(super_client, "bob@example.com")
    assert signed_in(app, "bob@example.com").post(f"/me/roles/accept/{accepted}").status_code == 200
    super_client.post("/supers/", json={"email": "new@example.com"})  # an invitation, no offer

    [item] = pending_supers(super_client)
    assert set(item) == {"id", "email", "offeredAt", "expiresAt"}
    assert (item["id"], item["email"]) == (str(ann.id), "ann@example.com")
    offered_at = datetime.fromisoformat(item["offeredAt"])
    expires_at = datetime.fromisoformat(item["expiresAt"])
    assert abs(expires_at - offered_at - timedelta(days=7)) < timedelta(seconds=1)

    withdrawn = super_client.delete(f"/supers/pending/id/{ann.id}")
    assert withdrawn.status_code == 204
    assert withdrawn.data == b""
    assert pending_supers(super_client) == []
    refused = signed_in(app, "ann@example.com").post(f"/me/roles/accept/{token}")
    assert refused.status_code == 404
    assert refused.mimetype == PROBLEM
    assert user_by_email("ann@example.com").is_super is False
    again = super_client.delete(f"/supers/pending/id/{ann.id}")
    assert again.status_code == 404
    assert again.mimetype == PROBLEM


def test_a_supers_offers_are_void_once_their_super_rights_are_revoked(
    super_client, app, other_super
):
    """Super, owner and admin offers alike; other supers' offers keep working."""
    make_location("harbour")
    for name in ("ann", "bob", "cal", "dee"):
        make_user(f"{name}@example.com")
    other = signed_in(app, "other@example.com")
    void = {
        "ann@example.com": offer_super(other, "ann@example.com"),
        "bob@example.com": member_offer(other, "owners", "bob@example.com"),
        "cal@example.com": member_offer(other, "admins", "cal@example.com"),
    }
    kept = offer_super(super_client, "dee@example.com")
    assert [item["email"] for item in pending_supers(super_client)] == [
        "ann@example.com",
        "dee@example.com",
    ]

    assert super_client.delete(f"/supers/id/{other_super.id}").status_code == 204
    assert [item["email"] for item in pending_supers(super_client)] == ["dee@example.com"]
    for role in ("owners", "admins"):
        assert super_client.get(f"/locations/harbour/{role}/pending/").get_json()["items"] == []
    for email, token in void.items():
        refused = signed_in(app, email).post(f"/me/roles/accept/{token}")
        assert refused.status_code == 404, email
        assert refused.mimetype == PROBLEM
    assert user_by_email("ann@example.com").is_super is False
    assert signed_in(app, "bob@example.com").get("/me/").get_json()["roles"] == []
    assert signed_in(app, "dee@example.com").post(f"/me/roles/accept/{kept}").status_code == 200
    assert user_by_email("dee@example.com").is_super is True


def test_update_changes_name_and_phone(super_client, app, other_super):
    response = super_client.put(
        f"/supers/id/{other_super.id}", json={"name": " Olga ", "phone": "+41 44 123 45 67"}
    )
    assert response.status_code == 200
    body = response.get_json()
    assert (body["name"], body["phone"]) == ("Olga", "+41 44 123 45 67")
    user = user_by_email("other@example.com")
    assert (user.name, user.phone) == ("Olga", "+41 44 123 45 67")
    # Partial: what is not sent stays.
    assert super_client.put(f"/supers/id/{other_super.id}", json={}).get_json()["name"] == "Olga"


def test_update_with_an_invalid_phone_is_422(super_client, app, other_super):
    response = super_client.put(f"/supers/id/{other_super.id}", json={"phone": "abc"})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "phone" in response.get_json()["errors"]
    assert user_by_email("other@example.com").phone is None


def test_update_of_email_is_422_naming_the_email_endpoint(super_client, app, other_super):
    response = super_client.put(
        f"/supers/id/{other_super.id}", json={"email": "changed@example.com"}
    )
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "/me/email-update" in " ".join(response.get_json()["errors"]["email"])
    assert user_by_email("changed@example.com") is None


def test_update_of_a_user_who_is_not_a_super_is_404(super_client, app, plain_user):
    response = super_client.put(f"/supers/id/{plain_user.id}", json={"name": "X"})
    assert response.status_code == 404
    assert user_by_email("plain@example.com").name is None


def test_revoking_another_super_keeps_the_account_and_ends_their_access(
    super_client, app, other_super
):
    other_client = signed_in(app, "other@example.com")
    assert other_client.get("/supers/").status_code == 200
    response = super_client.delete(f"/supers/id/{other_super.id}")
    assert response.status_code == 204
    assert response.data == b""
    user = user_by_email("other@example.com")
    assert user is not None
    assert user.is_super is False
    assert user.password_hash is not None
    assert other_client.get("/supers/").status_code == 403
    assert other_client.get("/me/").get_json()["isSuper"] is False
    assert super_client.get(f"/supers/id/{other_super.id}").status_code == 404


def test_revoking_the_last_active_super_is_409(super_client, app, super_user):
    response = super_client.delete(f"/supers/id/{super_user.id}")
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    assert user_by_email("super@example.com").is_super is True
    assert super_client.get("/supers/").status_code == 200


def test_an_invited_super_does_not_count_as_another_active_one(super_client, app, super_user):
    super_client.post("/supers/", json={"email": "new@example.com"})
    assert super_client.delete(f"/supers/id/{super_user.id}").status_code == 409
    assert user_by_email("super@example.com").is_super is True


def test_a_super_may_revoke_an_invited_super(super_client, app):
    user_id = super_client.post("/supers/", json={"email": "new@example.com"}).get_json()["id"]
    response = super_client.delete(f"/supers/id/{user_id}")
    assert response.status_code == 204
    user = user_by_email("new@example.com")
    assert user is not None
    assert user.is_super is False


def test_a_super_may_step_down_while_another_is_active(super_client, app, super_user, other_super):
    assert super_client.delete(f"/supers/id/{super_user.id}").status_code == 204
    assert user_by_email("super@example.com").is_super is False
    assert super_client.get("/supers/").status_code == 403


def test_revoking_a_user_who_is_not_a_super_is_404(super_client, app, plain_user):
    assert super_client.delete(f"/supers/id/{plain_user.id}").status_code == 404
    assert super_client.delete(f"/supers/id/{uuid.uuid4()}").status_code == 404


def test_invite_body_must_be_json(super_client, app):
    response = super_client.post(
        "/supers/", data="email=new@example.com", content_type="text/plain"
    )
    assert response.status_code == 415
    assert response.mimetype == PROBLEM
    assert user_by_email("new@example.com") is None


def test_revoking_an_invited_super_voids_the_invitation(super_client, app):
    from .conftest import link_in, queued_mail

    user_id = super_client.post("/supers/", json={"email": "new@example.com"}).get_json()["id"]
    token = link_in(queued_mail("new@example.com")[0].body, "?token=")
    assert super_client.delete(f"/supers/id/{user_id}").status_code == 204
    register = app.test_client().post(
        f"/me/register/{user_id}", json={"token": token, "password": "a long passphrase"}
    )
    assert register.status_code == 404
