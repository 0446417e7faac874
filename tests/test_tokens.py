"""Personal API tokens (API.md 14), as a script with curl sees them."""

import hashlib
import re
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from directory_api.models import ApiToken, utcnow
from directory_api.platform.bearer import checksum
from directory_api.platform.extensions import db

from .conftest import assert_problem, queued_mail
from .factories import PASSWORD

FORMAT = re.compile(r"^dapi_[0-9A-Za-z]{30}[0-9A-Za-z]{6}$")


def create(client, **body):
    sent = {"name": "nightly import", "password": PASSWORD, "scopes": ["directory:write"], **body}
    return client.post("/me/tokens/", json=sent)


def made(client, **body) -> str:
    response = create(client, **body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()["token"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_token_is_shown_once_and_stored_as_its_hash(clients, world):
    response = create(clients["owner"], locations=["harbour"], expiresInDays=30)
    assert response.status_code == 201
    body = response.get_json()
    assert FORMAT.match(body["token"])
    assert body["token"][-6:] == checksum(body["token"][5:35])
    assert response.headers["Location"] == f"/me/tokens/id/{body['id']}"
    assert body["prefix"] == body["token"][:12]
    assert body["scopes"] == ["directory:write"]
    assert body["locations"] == ["harbour"]
    assert body["lastUsedAt"] is None and body["lastUsedIp"] is None
    assert body["state"] == "active"
    stored = db.session.scalar(select(ApiToken))
    assert stored.token_hash == hashlib.sha256(body["token"].encode()).hexdigest()
    assert body["token"] not in repr(
        db.session.execute(select(ApiToken.__table__)).all()
    )  # the row holds no usable token
    shown = clients["owner"].get(f"/me/tokens/id/{body['id']}").get_json()
    assert "token" not in shown and shown["prefix"] == body["prefix"]
    listed = clients["owner"].get("/me/tokens/").get_json()
    assert [item["id"] for item in listed["items"]] == [body["id"]]
    assert "token" not in listed["items"][0]
    (mail,) = queued_mail(to="owner@example.com", template="token_created")
    assert body["prefix"] in mail.body and body["token"] not in mail.body


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"password": "wrong"}, 403),
        ({"scopes": ["directory:admin"]}, 422),
        ({"scopes": []}, 422),
        ({"locations": ["hill"]}, 422),  # no role there
        ({"locations": ["nowhere"]}, 422),
        ({"expiresInDays": 0}, 422),
        ({"expiresInDays": -5}, 422),
        ({"expiresInDays": 367}, 422),
        ({"name": ""}, 422),
        ({"name": "x" * 101}, 422),
    ],
)
def test_refused_creations_make_no_token(clients, world, body, status):
    assert_problem(create(clients["owner"], **body), status)
    assert db.session.scalar(select(ApiToken)) is None


def test_more_than_fifty_live_tokens_is_a_conflict(clients, world, monkeypatch):
    from directory_api import credentials

    monkeypatch.setattr(credentials, "MAX_LIVE_API_TOKENS", 2)
    made(clients["owner"])
    made(clients["owner"])
    assert_problem(create(clients["owner"]), 409)


def test_a_token_acts_as_its_user_within_its_scope(app, clients, world):
    token = made(clients["owner"])
    script = app.test_client()
    me = script.get("/me/", headers=bearer(token))
    assert me.status_code == 200 and me.get_json()["email"] == "owner@example.com"
    assert me.headers["Cache-Control"] == "no-store"
    assert "Authorization" in me.headers["Vary"]
    assert "Set-Cookie" not in me.headers
    created = script.post(
        "/locations/harbour/businesses/", json={"name": "Bakery"}, headers=bearer(token)
    )
    assert created.status_code == 201
    # no more than its user may: a super's route, another location
    assert_problem(script.post("/regions/", json={"name": "North"}, headers=bearer(token)), 403)
    assert_problem(
        script.post("/locations/hill/businesses/", json={"name": "X"}, headers=bearer(token)), 403
    )


def test_a_missing_scope_is_named(app, clients, world):
    token = made(clients["owner"], scopes=["directory:read"])
    response = app.test_client().post(
        "/locations/harbour/businesses/", json={"name": "Bakery"}, headers=bearer(token)
    )
    assert_problem(response, 403)
    assert response.headers["WWW-Authenticate"] == (
        'Bearer error="insufficient_scope", scope="directory:write"'
    )


def test_write_scopes_include_read(app, clients, world):
    token = made(clients["owner"], scopes=["members:write"])
    response = app.test_client().get("/locations/harbour/admins/", headers=bearer(token))
    assert response.status_code == 200


def test_a_token_limited_to_locations_reaches_no_other(app, clients, world):
    token = made(clients["super"], scopes=["directory:write"], locations=["hill"])
    script = app.test_client()
    ok = script.post("/locations/hill/businesses/", json={"name": "A"}, headers=bearer(token))
    assert ok.status_code == 201
    refused = script.post(
        "/locations/harbour/businesses/", json={"name": "B"}, headers=bearer(token)
    )
    assert_problem(refused, 403)


def test_a_token_never_exceeds_its_user_s_current_roles(app, clients, world):
    token = made(clients["owner"])
    from directory_api.models import Membership

    db.session.execute(Membership.__table__.delete().where(Membership.user_id == world["owner"].id))
    db.session.commit()
    response = app.test_client().post(
        "/locations/harbour/businesses/", json={"name": "Bakery"}, headers=bearer(token)
    )
    assert_problem(response, 403)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/me/tokens/", {"name": "n", "password": PASSWORD, "scopes": ["audit:read"]}),
        ("get", "/me/tokens/", None),
        ("delete", "/me/tokens/", None),
        ("post", "/me/password-update", {"currentPassword": PASSWORD, "newPassword": "x" * 20}),
        ("post", "/me/email-update", {"email": "new@example.com", "password": PASSWORD}),
        ("post", "/auth/logout", None),
    ],
)
def test_a_token_cannot_entrench_itself(app, clients, world, method, path, body):
    every = ["directory:write", "votes:moderate", "members:write", "audit:read", "webhooks:manage"]
    token = made(clients["owner"], scopes=every)
    response = getattr(app.test_client(), method)(path, json=body, headers=bearer(token))
    assert_problem(response, 403)


@pytest.mark.parametrize(
    "header",
    [
        "Bearer dapi_notatoken",
        "Bearer dapi_" + "a" * 36,  # the format, a wrong checksum
        "Bearer",
        "bearer \t ",
        "Bearer " + "x" * 10_000,
    ],
)
def test_a_bad_token_is_a_401_with_no_fallback_to_the_cookie(clients, world, header):
    response = clients["owner"].get("/me/", headers={"Authorization": header})
    assert_problem(response, 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer error=")


def test_expired_and_revoked_tokens_are_refused(app, clients, world):
    expired, revoked = made(clients["owner"]), made(clients["owner"])
    db.session.execute(
        update(ApiToken)
        .where(ApiToken.prefix == expired[:12])
        .values(expires_at=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()
    (revoked_row,) = [
        item
        for item in clients["owner"].get("/me/tokens/").get_json()["items"]
        if item["prefix"] == revoked[:12]
    ]
    assert clients["owner"].delete(f"/me/tokens/id/{revoked_row['id']}").status_code == 204
    for token in (expired, revoked):
        response = app.test_client().get("/me/", headers=bearer(token))
        assert_problem(response, 401)
        assert response.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    states = {
        state: [
            i["prefix"] for i in clients["owner"].get(f"/me/tokens/?state={state}").json["items"]
        ]
        for state in ("active", "expired", "revoked")
    }
    assert states == {"active": [], "expired": [expired[:12]], "revoked": [revoked[:12]]}


def test_a_token_in_the_query_string_is_refused(app, clients, world):
    token = made(clients["owner"])
    assert_problem(app.test_client().get(f"/me/?access_token={token}"), 400)


def test_a_bearer_request_skips_the_cross_site_check(app, clients, world):
    token = made(clients["owner"])
    response = app.test_client().post(
        "/locations/harbour/businesses/",
        json={"name": "Bakery"},
        headers={**bearer(token), "Origin": "https://evil.example"},
    )
    assert response.status_code == 201


def test_last_use_is_written_at_most_once_a_minute(app, clients, world):
    token = made(clients["owner"])
    script = app.test_client()
    script.get("/me/", headers=bearer(token), environ_base={"REMOTE_ADDR": "192.0.2.7"})
    first = db.session.scalar(select(ApiToken.last_used_at))
    assert first is not None
    assert db.session.scalar(select(ApiToken.last_used_ip)) == "192.0.2.7"
    script.get("/me/", headers=bearer(token), environ_base={"REMOTE_ADDR": "192.0.2.8"})
    db.session.rollback()
    assert db.session.scalar(select(ApiToken.last_used_at)) == first
    assert db.session.scalar(select(ApiToken.last_used_ip)) == "192.0.2.7"


def test_revoke_all_and_a_password_reset_revoke_every_token(app, clients, world):
    from .conftest import complete_reset, reset_token, start_reset

    made(clients["owner"])
    made(clients["owner"])
    assert clients["owner"].delete("/me/tokens/").status_code == 204
    assert clients["owner"].get("/me/tokens/?state=active").get_json()["total"] == 0
    token = made(clients["owner"])
    anonymous = app.test_client()
    start_reset(anonymous, "owner@example.com")
    assert complete_reset(anonymous, reset_token("owner@example.com")).status_code == 204
    assert_problem(app.test_client().get("/me/", headers=bearer(token)), 401)


def test_a_leaked_token_is_revoked_by_anyone_who_holds_it(app, clients, world):
    token = made(clients["owner"])
    anonymous = app.test_client()
    assert anonymous.post("/auth/tokens/revoke", json={"token": "dapi_nothing"}).status_code == 204
    assert anonymous.post("/auth/tokens/revoke", json={"token": token}).status_code == 204
    assert_problem(anonymous.get("/me/", headers=bearer(token)), 401)
    assert len(queued_mail(to="owner@example.com", template="token_leaked")) == 1
    assert anonymous.post("/auth/tokens/revoke", json={"token": token}).status_code == 204
    assert len(queued_mail(to="owner@example.com", template="token_leaked")) == 1


def test_supers_see_and_revoke_every_token(clients, world):
    made(clients["owner"])
    made(clients["admin"])
    listed = clients["super"].get("/tokens/").get_json()
    assert listed["total"] == 2
    owner_id = str(world["owner"].id)
    mine = clients["super"].get(f"/tokens/?user={owner_id}").get_json()["items"]
    assert [item["user"] for item in mine] == [owner_id]
    assert clients["super"].delete(f"/tokens/id/{mine[0]['id']}").status_code == 204
    assert clients["super"].get("/tokens/?state=revoked").get_json()["total"] == 1
    assert_problem(clients["owner"].get("/tokens/"), 403)
    assert_problem(clients["anonymous"].get("/tokens/"), 401)


def test_one_user_cannot_see_or_revoke_another_s_token(clients, world):
    made(clients["owner"])
    (item,) = clients["owner"].get("/me/tokens/").get_json()["items"]
    assert_problem(clients["admin"].get(f"/me/tokens/id/{item['id']}"), 404)
    assert_problem(clients["admin"].delete(f"/me/tokens/id/{item['id']}"), 404)
    assert clients["owner"].get(f"/me/tokens/id/{item['id']}").get_json()["state"] == "active"


def test_tokens_are_audited_and_entries_through_one_name_it(app, clients, world):
    token = made(clients["owner"])
    created = app.test_client().post(
        "/locations/harbour/businesses/", json={"name": "Bakery"}, headers=bearer(token)
    )
    assert created.status_code == 201
    (item,) = clients["owner"].get("/me/tokens/").get_json()["items"]
    assert clients["owner"].delete(f"/me/tokens/id/{item['id']}").status_code == 204

    entries = clients["super"].get("/audit/?perPage=100").get_json()["items"]
    by_action = {entry["action"]: entry for entry in entries}
    made_entry, revoked = by_action["token.create"], by_action["token.revoke"]
    assert made_entry["target"] == {"type": "token", "id": item["id"], "slug": None}
    assert made_entry["actor"] == {"id": str(world["owner"].id), "email": "owner@example.com"}
    assert revoked["changes"]["revokedAt"][0] is None
    business = by_action["business.create"]
    assert business["actor"] == {
        "id": str(world["owner"].id),
        "email": "owner@example.com",
        "tokenId": item["id"],
    }
    assert "tokenId" not in revoked["actor"]  # revoked by a session


def test_a_token_about_to_expire_is_noticed_once(app, clients, world):
    from directory_api.credentials import notice_expiring_tokens

    soon, later = made(clients["owner"], expiresInDays=5), made(clients["owner"], name="later")
    with app.app_context():
        assert notice_expiring_tokens() == 1
        assert notice_expiring_tokens() == 0  # once
    (mail,) = queued_mail(to="owner@example.com", template="token_expiring")
    assert soon[:12] in mail.body and later[:12] not in mail.body
    with app.app_context():
        assert notice_expiring_tokens(utcnow() + timedelta(days=85)) == 1  # the other, later


def test_a_copy_of_the_database_holds_no_usable_token(app, clients, world):
    """Every row of every table, after a token was made, used and mailed about: neither
    the token nor its random part is anywhere; its hash alone cannot be sent."""
    from .conftest import database_rows

    token = made(clients["owner"])
    assert app.test_client().get("/me/", headers=bearer(token)).status_code == 200
    everything = repr(database_rows())
    assert token not in everything and token[5:35] not in everything
    stored = db.session.scalar(select(ApiToken.token_hash))
    assert_problem(app.test_client().get("/me/", headers=bearer(stored)), 401)


def test_another_scheme_is_not_a_token(clients, world):
    """A staging site's proxy may pass its Basic credentials on: the cookie still counts."""
    response = clients["owner"].get("/me/", headers={"Authorization": "Basic b3duZXI6cGFzcw=="})
    assert response.status_code == 200


def test_a_tab_may_separate_the_scheme_and_the_token(app, clients, world):
    token = made(clients["owner"])
    response = app.test_client().get("/me/", headers={"Authorization": f"bearer\t{token}"})
    assert response.status_code == 200


def test_a_token_limited_to_places_acts_nowhere_else(app, clients, world):
    """Its limit narrows everything its user may do: a super's token limited to one place
    may not invite a super, create a location or read the whole audit log."""
    every = ["directory:write", "members:write", "audit:read"]
    token = made(clients["super"], scopes=every, locations=["hill"])
    script = app.test_client()
    for method, path, body in [
        ("post", "/supers/", {"email": "mallory@evil.example"}),
        ("post", "/locations/", {"name": "Elsewhere"}),
        ("get", "/audit/", None),
        ("put", f"/me/id/{world['owner'].id}", {"name": "Renamed"}),
    ]:
        response = getattr(script, method)(path, json=body, headers=bearer(token))
        assert_problem(response, 403)
    assert script.get("/me/", headers=bearer(token)).status_code == 200
    listed = script.post("/locations/hill/businesses/", json={"name": "A"}, headers=bearer(token))
    assert listed.status_code == 201


def test_a_token_cannot_make_a_session(app, clients, world):
    token = made(clients["owner"])
    response = app.test_client().post(
        "/auth/login",
        json={"email": "owner@example.com", "password": PASSWORD},
        headers=bearer(token),
    )
    assert_problem(response, 403)
    assert "Set-Cookie" not in response.headers


def test_a_failed_last_use_write_fails_nothing_else(app, clients, world, caplog):
    """The note of a token's last use is written after the answer; when the database
    refuses it, the answer stands and a warning says what was lost."""
    from sqlalchemy import event
    from sqlalchemy.exc import OperationalError

    token = made(clients["owner"])

    def refuse(_conn, _cursor, statement, *_args):
        if statement.startswith("UPDATE api_tokens"):
            raise OperationalError(statement, None, Exception("database is locked"))

    engine = db.engine
    event.listen(engine, "before_cursor_execute", refuse)
    try:
        response = app.test_client().get("/me/", headers=bearer(token))
    finally:
        event.remove(engine, "before_cursor_execute", refuse)
    assert response.status_code == 200
    assert "last use was not written" in caplog.text
    assert db.session.scalar(select(ApiToken.last_used_at)) is None


def test_where_a_token_was_used_from_is_forgotten_with_the_votes_details(app, clients, world):
    from directory_api.privacy import run_retention

    token = made(clients["owner"])
    app.test_client().get("/me/", headers=bearer(token), environ_base={"REMOTE_ADDR": "192.0.2.7"})
    days = app.config["PII_RETENTION_DAYS"]
    with app.app_context():
        run_retention(utcnow() + timedelta(days=days - 1))
        assert db.session.scalar(select(ApiToken.last_used_ip)) == "192.0.2.7"
        run_retention(utcnow() + timedelta(days=days + 1))
        assert db.session.scalar(select(ApiToken.last_used_ip)) is None
        assert db.session.scalar(select(ApiToken.last_used_at)) is not None


def test_the_public_revocation_shares_the_token_allowance(app_factory):
    app = app_factory(RATELIMIT_TOKENS_PER_IP="2/hour")
    client = app.test_client()
    first = client.post("/votes/confirm/nope")
    second = client.post("/auth/tokens/revoke", json={"token": "dapi_nothing"})
    third = client.post("/auth/tokens/revoke", json={"token": "dapi_nothing"})
    assert [first.status_code, second.status_code, third.status_code] == [404, 204, 429]
    assert third.mimetype == "application/problem+json"


def test_supers_find_tokens_not_used_since_a_moment(app, clients, world):
    used, idle = made(clients["owner"]), made(clients["admin"])
    app.test_client().get("/me/", headers=bearer(used))
    found = clients["super"].get("/tokens/?lastUsedBefore=2020-01-01").get_json()["items"]
    assert [item["prefix"] for item in found] == [idle[:12]]  # never used counts as idle
    tomorrow = (utcnow() + timedelta(days=1)).date().isoformat()
    everything = clients["super"].get(f"/tokens/?lastUsedBefore={tomorrow}").get_json()
    assert everything["total"] == 2
    assert used[:12] in {item["prefix"] for item in everything["items"]}
