"""/me: registration, password reset, password and e-mail changes, personal details."""

import hashlib
from datetime import timedelta

import pytest

from directory_api.models import Membership, Role, RoleGrant, Token, TokenPurpose, User, utcnow
from directory_api.platform.extensions import db

from .conftest import (
    NEW_PASSWORD,
    complete_reset,
    link_in,
    queued_mail,
    reset_token,
    send_outbox,
    signed_in,
    start_reset,
    statements_run,
)
from .factories import PASSWORD, grant, make_location, make_user


def invite_owner(super_client, email="owner@example.com"):
    make_location("harbour")
    response = super_client.post("/locations/harbour/owners/", json={"email": email})
    assert response.status_code == 201
    return response.get_json()["id"]


def invitation_token(email="owner@example.com") -> str:
    [mail] = [m for m in queued_mail(email) if "/register/" in m.body]
    return link_in(mail.body, "?token=")


def register(client, user_id, token, password=NEW_PASSWORD, **extra):
    return client.post(
        f"/me/register/{user_id}", json={"token": token, "password": password, **extra}
    )


# Registration


def test_invitation_register_and_login_through_real_smtp(mail_app, mailbox):
    make_user("super@example.com", is_super=True)
    boss = signed_in(mail_app, "super@example.com")
    user_id = invite_owner(boss)
    send_outbox(mail_app)
    [message] = mailbox.to("owner@example.com")
    text = message.get_content()
    assert f"http://localhost:3000/register/{user_id}?token=" in text
    token = link_in(text, "?token=")

    client = mail_app.test_client()
    response = register(client, user_id, token, name="Olive Owner")
    assert response.status_code == 200
    body = response.get_json()
    assert (body["status"], body["name"]) == ("active", "Olive Owner")
    assert body["roles"] == [{"location": "harbour", "role": "owner"}]
    assert client.get("/me/").get_json()["email"] == "owner@example.com"

    fresh = mail_app.test_client()
    login = fresh.post("/auth/login", json={"email": "owner@example.com", "password": NEW_PASSWORD})
    assert login.status_code == 200


@pytest.mark.parametrize("by", ["cookie", "token"])
def test_me_shows_every_role_from_one_statement(app, by):
    """The signed-in user's roles come with their locations' slugs in the statement that
    finds who asks (issue 36: one round trip), by a session or by a token."""
    user = make_user("ann@example.com")
    for slug, role in (("zeta", Role.ADMIN), ("alpha", Role.OWNER), ("mid", Role.ADMIN)):
        grant(user, make_location(slug), role)
    client = signed_in(app, "ann@example.com")
    headers = {}
    if by == "token":
        made = client.post(
            "/me/tokens/", json={"name": "t", "password": PASSWORD, "scopes": ["directory:read"]}
        )
        headers = {"Authorization": f"Bearer {made.get_json()['token']}"}
        client = app.test_client()
        assert client.get("/me/", headers=headers).status_code == 200  # its use noted: not due
    db.session.expunge_all()  # as a new request finds it: nothing loaded before
    with statements_run() as run:
        response = client.get("/me/", headers=headers)
    assert response.status_code == 200
    assert response.get_json()["roles"] == [
        {"location": "alpha", "role": "owner"},
        {"location": "mid", "role": "admin"},
        {"location": "zeta", "role": "admin"},
    ]
    assert len(run) == 1, [executed.sql for executed in run]


def test_a_signed_in_request_loads_the_user_alone_whatever_their_roles(app):
    """Roles are loaded for /me only: every other signed-in request reads the user's one
    row (a user with many roles must not make each request read them all)."""
    user = make_user("ann@example.com")
    for number in range(30):
        grant(user, make_location(f"l{number}"), Role.ADMIN)
    client = signed_in(app, "ann@example.com")
    with statements_run() as run:
        response = client.get("/locations/l3/votes/")
    assert response.status_code == 200
    [loader] = [executed.sql for executed in run if "session_token" in executed.sql]
    assert "memberships" not in loader


def assert_not_found_without_user_data(response):
    assert response.status_code == 404
    assert response.mimetype == "application/problem+json"
    assert "owner@example.com" not in response.get_data(as_text=True)


def test_an_invitation_token_works_once(super_client, app):
    user_id = invite_owner(super_client)
    token = invitation_token()
    assert register(app.test_client(), user_id, token).status_code == 200
    assert_not_found_without_user_data(register(app.test_client(), user_id, token))


def flip_last(token: str) -> str:
    return token[:-1] + ("A" if token[-1] != "A" else "B")


@pytest.mark.parametrize("mangle", [flip_last, lambda t: "x" * 43, lambda t: ""])
def test_a_tampered_invitation_token_is_404(super_client, app, mangle):
    user_id = invite_owner(super_client)
    assert_not_found_without_user_data(
        register(app.test_client(), user_id, mangle(invitation_token()))
    )
    assert User.query.filter_by(email="owner@example.com").one().status == "invited"


def test_the_id_alone_is_not_enough(super_client, app):
    user_id = invite_owner(super_client)
    token = invitation_token()
    stranger = make_user("stranger@example.com", password=None)
    assert_not_found_without_user_data(register(app.test_client(), stranger.id, token))
    assert register(app.test_client(), user_id, token).status_code == 200


def test_an_expired_invitation_is_404(super_client, app):
    user_id = invite_owner(super_client)
    token = invitation_token()
    db.session.query(Token).update({"expires_at": utcnow() - timedelta(seconds=1)})
    db.session.commit()
    assert_not_found_without_user_data(register(app.test_client(), user_id, token))


def test_a_new_invitation_supersedes_the_old_one(super_client, app):
    user_id = invite_owner(super_client)
    first = invitation_token()
    again = super_client.post("/locations/harbour/owners/", json={"email": "owner@example.com"})
    assert again.status_code == 201
    latest = [m for m in queued_mail("owner@example.com") if "/register/" in m.body][-1]
    second = link_in(latest.body, "?token=")
    assert second != first
    assert_not_found_without_user_data(register(app.test_client(), user_id, first))
    assert register(app.test_client(), user_id, second).status_code == 200


def test_registration_checks_the_password(super_client, app):
    user_id = invite_owner(super_client)
    token = invitation_token()
    short = register(app.test_client(), user_id, token, password="short")
    assert short.status_code == 422
    assert "password" in short.get_json()["errors"]
    same = register(app.test_client(), user_id, token, password="owner@example.com")
    assert same.status_code == 422
    # A refused attempt does not use the token up.
    assert register(app.test_client(), user_id, token).status_code == 200


def test_an_active_user_cannot_register_again(app, client):
    user = make_user("ann@example.com")
    response = register(client, user.id, "whatever-token")
    assert response.status_code == 404


# Password reset


def test_password_reset_through_real_smtp(mail_app, mailbox):
    make_user("ann@example.com")
    other_session = signed_in(mail_app, "ann@example.com")
    client = mail_app.test_client()
    assert start_reset(client, "ann@example.com").status_code == 202
    send_outbox(mail_app)
    [message] = mailbox.to("ann@example.com")
    token = link_in(message.get_content(), "http://localhost:3000/password-reset/")

    response = complete_reset(client, token)
    assert response.status_code == 204
    assert client.get("/me/").status_code == 401  # a reset does not sign in
    assert other_session.get("/me/").status_code == 401  # and it ends every session
    old = client.post("/auth/login", json={"email": "ann@example.com", "password": PASSWORD})
    assert old.status_code == 401
    new = client.post("/auth/login", json={"email": "ann@example.com", "password": NEW_PASSWORD})
    assert new.status_code == 200
    send_outbox(mail_app)
    assert "was changed" in mailbox.to("ann@example.com")[-1]["Subject"]


def test_reset_start_answers_the_same_for_every_address(client, app):
    make_user("ann@example.com")
    make_user("invited@example.com", password=None)
    answers = [
        start_reset(client, email)
        for email in ("ann@example.com", "nobody@example.com", "invited@example.com")
    ]
    assert {r.status_code for r in answers} == {202}
    assert len({r.get_data() for r in answers}) == 1
    assert [m.recipients for m in queued_mail()] == [["ann@example.com"]]


def test_a_reset_token_works_once_and_for_one_hour(client, app):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    assert complete_reset(client, token).status_code == 204
    again = complete_reset(client, token, "yet another passphrase")
    assert again.status_code == 404

    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    db.session.query(Token).filter_by(purpose=TokenPurpose.PASSWORD_RESET).update(
        {"expires_at": utcnow() - timedelta(seconds=1)}
    )
    db.session.commit()
    assert complete_reset(client, token).status_code == 404


def test_a_newer_reset_request_voids_the_older_link(client, app):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    first = reset_token("ann@example.com")
    start_reset(client, "ann@example.com")
    second = reset_token("ann@example.com")
    assert complete_reset(client, first).status_code == 404
    assert complete_reset(client, second).status_code == 204


def test_a_password_change_voids_reset_links(client, app):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    changed = ann.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD}
    )
    assert changed.status_code == 204
    assert complete_reset(client, token, "third passphrase!").status_code == 404


def test_reset_completion_checks_the_password(client, app):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    refused = complete_reset(client, token, "ann@example.com")
    assert refused.status_code == 422
    assert complete_reset(client, token).status_code == 204


def test_reset_start_is_rate_limited(app_factory):
    app = app_factory(RATELIMIT_RESET_PER_IP="2/hour")
    client = app.test_client()
    statuses = [start_reset(client, f"n{n}@example.com").status_code for n in range(3)]
    assert statuses == [202, 202, 429]


def test_reset_start_is_rate_limited_per_address(app_factory):
    app = app_factory(RATELIMIT_RESET_PER_EMAIL="2/hour")
    client = app.test_client()
    statuses = [
        client.post(
            "/me/password-reset",
            json={"email": "ann@example.com"},
            environ_base={"REMOTE_ADDR": f"10.0.0.{n}"},
        ).status_code
        for n in range(3)
    ]
    assert statuses == [202, 202, 429]


def test_token_endpoints_share_a_limit(app_factory):
    app = app_factory(RATELIMIT_TOKENS_PER_IP="2/hour")
    client = app.test_client()
    first = client.post("/me/password-reset/nope", json={"password": NEW_PASSWORD})
    second = client.post("/me/email-update/nope")
    third = client.post(
        f"/me/register/{'0' * 8}-0000-0000-0000-{'0' * 12}",
        json={"token": "x", "password": NEW_PASSWORD},
    )
    assert [first.status_code, second.status_code, third.status_code] == [404, 404, 429]
    assert "Retry-After" in third.headers


def test_email_changes_are_limited_per_account_whatever_the_address(app_factory):
    app = app_factory(RATELIMIT_EMAIL_UPDATE_PER_ACCOUNT="2/hour")
    with app.app_context():
        make_user("ann@example.com")
        make_user("bob@example.com")
    ann, bob = signed_in(app, "ann@example.com"), signed_in(app, "bob@example.com")
    statuses = [
        ann.post(
            "/me/email-update",
            json={"email": f"target{n}@example.com", "password": PASSWORD},
            environ_base={"REMOTE_ADDR": f"10.0.0.{n}"},  # from other addresses, too
        ).status_code
        for n in range(3)
    ]
    assert statuses == [202, 202, 429]
    with app.app_context():
        assert queued_mail("target2@example.com") == []
    other = bob.post("/me/email-update", json={"email": "b@example.com", "password": PASSWORD})
    assert other.status_code == 202  # another account has its own allowance


# Password update


def test_password_update_ends_other_sessions_but_not_this_one(app):
    make_user("ann@example.com")
    changer, other = signed_in(app, "ann@example.com"), signed_in(app, "ann@example.com")
    response = changer.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD}
    )
    assert response.status_code == 204
    assert changer.get("/me/").status_code == 200
    assert other.get("/me/").status_code == 401
    assert [m.subject for m in queued_mail("ann@example.com")] == [
        "Your Directory password was changed"
    ]


def test_password_update_needs_the_current_password(app, client):
    make_user("ann@example.com")
    assert (
        client.post(
            "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD}
        ).status_code
        == 401
    )
    ann = signed_in(app, "ann@example.com")
    wrong = ann.post(
        "/me/password-update",
        json={"currentPassword": "not it at all", "newPassword": NEW_PASSWORD},
    )
    assert wrong.status_code == 403
    weak = ann.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": "short"}
    )
    assert weak.status_code == 422
    assert "newPassword" in weak.get_json()["errors"]
    assert queued_mail() == []


# E-mail change


def test_email_change_confirmed_from_the_new_address(app):
    make_user("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    response = ann.post("/me/email-update", json={"email": "Ann@New.example", "password": PASSWORD})
    assert response.status_code == 202
    [confirm] = [m for m in queued_mail("ann@new.example")]
    [notice] = [m for m in queued_mail("ann@example.com")]
    assert "ann@new.example" in notice.body and "/email-update/" not in notice.body
    token = link_in(confirm.body, "/email-update/")
    assert ann.get("/me/").get_json()["email"] == "ann@example.com"  # not until confirmed

    confirmed = app.test_client().post(f"/me/email-update/{token}")
    assert confirmed.status_code == 200
    assert confirmed.get_json()["email"] == "ann@new.example"
    assert app.test_client().post(f"/me/email-update/{token}").status_code == 404
    login = app.test_client().post(
        "/auth/login", json={"email": "ann@new.example", "password": PASSWORD}
    )
    assert login.status_code == 200
    assert any("now ann@new.example" in m.body for m in queued_mail("ann@example.com"))


def test_email_change_refusals(app, client):
    make_user("ann@example.com")
    make_user("bob@example.com")
    assert (
        client.post(
            "/me/email-update", json={"email": "x@example.com", "password": PASSWORD}
        ).status_code
        == 401
    )
    ann = signed_in(app, "ann@example.com")
    assert (
        ann.post(
            "/me/email-update", json={"email": "x@example.com", "password": "wrong one!!"}
        ).status_code
        == 403
    )
    assert (
        ann.post(
            "/me/email-update", json={"email": "BOB@example.com", "password": PASSWORD}
        ).status_code
        == 409
    )
    assert (
        ann.post(
            "/me/email-update", json={"email": "not an address", "password": PASSWORD}
        ).status_code
        == 422
    )
    assert queued_mail() == []


def test_email_change_rechecks_the_address_on_confirmation(app):
    make_user("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    ann.post("/me/email-update", json={"email": "new@example.com", "password": PASSWORD})
    token = link_in(queued_mail("new@example.com")[0].body, "/email-update/")
    make_user("new@example.com")  # someone took the address meanwhile
    assert app.test_client().post(f"/me/email-update/{token}").status_code == 409
    assert User.query.filter_by(email="ann@example.com").count() == 1


# Personal details


def test_update_own_details(app, client):
    ann = make_user("ann@example.com")
    url = f"/me/id/{ann.id}"
    assert client.put(url, json={"name": "Ann"}).status_code == 401
    me = signed_in(app, "ann@example.com")
    response = me.put(url, json={"name": "Ann Smith", "phone": "+44 20 7946 0000"})
    assert response.status_code == 200
    assert (response.get_json()["name"], response.get_json()["phone"]) == (
        "Ann Smith",
        "+44 20 7946 0000",
    )


def test_only_self_or_a_super_may_update_details(app, user_client, super_client):
    ann = make_user("ann@example.com")
    assert user_client.put(f"/me/id/{ann.id}", json={"name": "Hacked"}).status_code == 403
    assert super_client.put(f"/me/id/{ann.id}", json={"name": "Ann S."}).status_code == 200
    assert User.query.filter_by(email="ann@example.com").one().name == "Ann S."
    unknown = super_client.put("/me/id/00000000-0000-0000-0000-000000000000", json={"name": "x"})
    assert unknown.status_code == 404


@pytest.mark.parametrize(
    ("field", "value", "hint"),
    [
        ("email", "new@example.com", "/me/email-update"),
        ("password", "a new passphrase", "/me/password-update"),
        ("isSuper", True, "/supers/"),
        ("roles", [], "owners"),
    ],
)
def test_details_update_points_other_fields_elsewhere(app, field, value, hint):
    ann = make_user("ann@example.com")
    me = signed_in(app, "ann@example.com")
    response = me.put(f"/me/id/{ann.id}", json={field: value})
    assert response.status_code == 422
    assert hint in response.get_json()["errors"][field][0]
    assert User.query.filter_by(email="ann@example.com").one().is_super is False


def test_no_account_answer_carries_a_secret(app):
    make_user("ann@example.com")
    client = signed_in(app, "ann@example.com")
    text = client.get("/me/").get_data(as_text=True)
    user = User.query.one()
    assert user.password_hash not in text and user.session_token not in text


def test_a_password_change_voids_a_pending_email_change(app):
    """Someone who knew the password asks to move the account; the owner changes it."""
    make_user("ann@example.com")
    intruder = signed_in(app, "ann@example.com")
    intruder.post("/me/email-update", json={"email": "evil@example.com", "password": PASSWORD})
    token = link_in(queued_mail("evil@example.com")[0].body, "/email-update/")
    owner = signed_in(app, "ann@example.com")
    changed = owner.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD}
    )
    assert changed.status_code == 204
    assert app.test_client().post(f"/me/email-update/{token}").status_code == 404
    assert User.query.filter_by(email="ann@example.com").count() == 1


# One address, however it is spelled (NFKC, case-folded; API.md 9)

SPELLINGS = [
    "ann@example.com",
    "ａnn@example.com",  # fullwidth a
    "ANN@EXAMPLE.COM",
    "Ann@Example.com",
    "ＡＮＮ@ｅｘａｍｐｌｅ.ｃｏｍ",
    "  ann@example.com  ",
]


def test_reset_spellings_of_one_address_share_its_allowance(client, app):
    make_user("ann@example.com")
    statuses = [
        client.post(
            "/me/password-reset",
            json={"email": spelling},
            environ_base={"REMOTE_ADDR": f"10.0.1.{number}"},
        ).status_code
        for number, spelling in enumerate(SPELLINGS)
    ]
    assert statuses == [202] * 5 + [429]
    mails = [m for m in queued_mail() if "/password-reset/" in m.body]
    assert len(mails) == 5
    assert all(m.recipients == ["ann@example.com"] for m in mails)


def test_idn_domain_spellings_share_one_account_and_allowance(app_factory):
    app = app_factory(RATELIMIT_RESET_PER_EMAIL="1/hour")
    with app.app_context():
        make_user("ann@bücher.de")
        statuses = [
            app.test_client()
            .post(
                "/me/password-reset",
                json={"email": spelling},
                environ_base={"REMOTE_ADDR": f"10.0.3.{number}"},
            )
            .status_code
            for number, spelling in enumerate(("ann@xn--bcher-kva.de", "ANN@BÜCHER.DE"))
        ]
        assert statuses == [202, 429]
        assert [m.recipients for m in queued_mail()] == [["ann@bücher.de"]]
        signed_in(app, "ann@xn--bcher-kva.de")  # the punycode spelling signs in too


def test_an_address_invited_in_fullwidth_capitals_is_one_account(super_client, app):
    first = super_client.post("/supers/", json={"email": "ＡＮＮ@example.com"})
    assert first.status_code == 201
    assert first.get_json()["email"] == "ann@example.com"
    again = super_client.post("/supers/", json={"email": "ann@EXAMPLE.com"})
    assert again.status_code == 201  # a fresh invitation for the same account
    assert again.get_json()["id"] == first.get_json()["id"]
    assert User.query.filter(User.email.like("%nn@%")).count() == 1


def test_an_existing_account_is_taken_in_every_spelling(super_client, app):
    make_user("ann@example.com", is_super=True)
    make_user("bob@example.com")
    for spelling in SPELLINGS[1:]:
        assert super_client.post("/supers/", json={"email": spelling}).status_code == 409
    bob = signed_in(app, "bob@example.com")
    taken = bob.post("/me/email-update", json={"email": "ａＮＮ@example.com", "password": PASSWORD})
    assert taken.status_code == 409
    # And it signs in with any spelling.
    assert signed_in(app, "ＡＮＮ@Example.com").get("/me/").get_json()["email"] == "ann@example.com"


# Role offers: an existing account gains a role only by accepting it (API.md 9)


def offer_admin_role(super_client, email="ann@example.com") -> str:
    """A super offers harbour's admin role to the active account `email`; returns the token."""
    response = super_client.post("/locations/harbour/admins/", json={"email": email})
    assert response.status_code == 201
    return link_in(queued_mail(email)[-1].body, "/roles/accept/")


def accept_role(client, token):
    return client.post(f"/me/roles/accept/{token}")


def harbour_roles(email="ann@example.com") -> list[Role]:
    db.session.rollback()
    user = User.query.filter_by(email=email).one()
    return [m.role for m in Membership.query.filter_by(user_id=user.id)]


def test_a_role_offer_accepted_through_real_smtp(mail_app, mailbox):
    make_user("super@example.com", is_super=True)
    make_user("ann@example.com", name="Ann")
    make_location("harbour", name="Harbour")
    offer_admin_role(signed_in(mail_app, "super@example.com"))
    send_outbox(mail_app)
    [message] = mailbox.to("ann@example.com")
    assert message["Subject"] == "You are offered a new role in the Directory"
    text = message.get_content()
    assert "admin of Harbour" in text
    token = link_in(text, "http://localhost:3000/roles/accept/")

    ann = signed_in(mail_app, "ann@example.com")
    response = accept_role(ann, token)
    assert response.status_code == 200
    assert response.get_json() == ann.get("/me/").get_json()
    assert response.get_json()["roles"] == [{"location": "harbour", "role": "admin"}]


def test_an_offer_is_only_for_its_user_and_works_once(super_client, app):
    make_location("harbour")
    make_user("ann@example.com")
    make_user("bob@example.com")
    token = offer_admin_role(super_client)

    anonymous = accept_role(app.test_client(), token)
    assert anonymous.status_code == 401
    assert anonymous.mimetype == "application/problem+json"
    bob = signed_in(app, "bob@example.com")
    for stranger in (bob, super_client):  # a super included: it is not theirs to accept
        refused = accept_role(stranger, token)
        assert refused.status_code == 404
        assert refused.mimetype == "application/problem+json"
        assert "ann@example.com" not in refused.get_data(as_text=True)
    assert bob.get("/me/").get_json()["roles"] == []
    assert harbour_roles() == []

    ann = signed_in(app, "ann@example.com")
    assert accept_role(ann, token).status_code == 200  # still usable by the right user
    assert harbour_roles() == [Role.ADMIN]
    again = accept_role(ann, token)
    assert again.status_code == 404
    assert again.mimetype == "application/problem+json"


@pytest.mark.parametrize("mangle", [flip_last, lambda t: "x" * 43, lambda t: "x" * 300])
def test_a_tampered_offer_token_is_404(super_client, app, mangle):
    make_location("harbour")
    make_user("ann@example.com")
    token = offer_admin_role(super_client)
    ann = signed_in(app, "ann@example.com")
    assert accept_role(ann, mangle(token)).status_code == 404
    assert harbour_roles() == []
    assert accept_role(ann, token).status_code == 200


def test_an_expired_offer_is_404(super_client, app):
    make_location("harbour")
    make_user("ann@example.com")
    token = offer_admin_role(super_client)
    db.session.query(RoleGrant).update({"expires_at": utcnow() - timedelta(seconds=1)})
    db.session.commit()
    response = accept_role(signed_in(app, "ann@example.com"), token)
    assert response.status_code == 404
    assert harbour_roles() == []


def test_an_offer_keeps_only_a_hash_for_seven_days(super_client, app):
    make_location("harbour")
    make_user("ann@example.com")
    token = offer_admin_role(super_client)
    db.session.rollback()
    offer = RoleGrant.query.one()
    assert token not in repr(offer.__dict__)
    assert offer.token_hash == hashlib.sha256(token.encode()).hexdigest()
    lifetime = offer.expires_at - offer.created_at
    assert timedelta(days=7) - timedelta(minutes=1) < lifetime <= timedelta(days=7)


def test_accepting_a_role_already_held_or_bettered_changes_nothing(super_client, app):
    harbour = make_location("harbour")
    ann = make_user("ann@example.com")
    token = offer_admin_role(super_client)
    grant(ann, harbour, Role.OWNER)  # made an owner meanwhile: owner supersedes admin
    response = accept_role(signed_in(app, "ann@example.com"), token)
    assert response.status_code == 200
    assert response.get_json()["roles"] == [{"location": "harbour", "role": "owner"}]
    assert harbour_roles() == [Role.OWNER]


def test_the_accept_endpoint_shares_the_token_allowance(app_factory):
    app = app_factory(RATELIMIT_TOKENS_PER_IP="2/hour")
    with app.app_context():
        make_user("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    first = app.test_client().post("/me/password-reset/nope", json={"password": NEW_PASSWORD})
    second = accept_role(ann, "nope")
    third = accept_role(ann, "nope")
    assert [first.status_code, second.status_code, third.status_code] == [404, 404, 429]
    assert "Retry-After" in third.headers
