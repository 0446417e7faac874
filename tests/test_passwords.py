"""A common or breached password is refused wherever a password is set (API.md 9)."""

import pytest

from directory_api.models import User

from .conftest import reset_token, signed_in, start_reset
from .factories import PASSWORD, make_user
from .test_me import invitation_token, invite_owner, register

COMMON = ["1234567890", "aaaaaaaaaa", "password123", "PASSWORD123", "qwertyuiop"]
# Random words with a number: nobody's list holds it.
PASSPHRASE = "trombone violet harbour kettle 42"
LISTED = "Is a commonly used or breached password; choose another."


def assert_refused_as_common(response, field: str) -> None:
    assert response.status_code == 422
    assert response.mimetype == "application/problem+json"
    assert response.get_json()["errors"][field] == [LISTED]


def test_the_suites_own_passwords_are_not_listed():
    from directory_api.schemas.passwords import password_problems

    assert password_problems(PASSWORD) == []
    assert password_problems(PASSPHRASE) == []


@pytest.mark.parametrize("password", COMMON)
def test_registration_refuses_a_common_password(super_client, app, password):
    user_id = invite_owner(super_client)
    token = invitation_token()
    assert_refused_as_common(register(app.test_client(), user_id, token, password), "password")
    # Refused, the token still works (with a good password).
    assert register(app.test_client(), user_id, token, PASSPHRASE).status_code == 200


@pytest.mark.parametrize("password", COMMON)
def test_reset_refuses_a_common_password(client, app, password):
    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    refused = client.post(f"/me/password-reset/{token}", json={"password": password})
    assert_refused_as_common(refused, "password")
    done = client.post(f"/me/password-reset/{token}", json={"password": PASSPHRASE})
    assert done.status_code == 204
    assert signed_in(app, "ann@example.com", PASSPHRASE).get("/me/").status_code == 200


@pytest.mark.parametrize("password", COMMON)
def test_password_update_refuses_a_common_password(app, password):
    make_user("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    refused = ann.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": password}
    )
    assert_refused_as_common(refused, "newPassword")
    # Nothing changed: the old password still signs in.
    assert signed_in(app, "ann@example.com").get("/me/").status_code == 200
    changed = ann.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": PASSPHRASE}
    )
    assert changed.status_code == 204


def test_a_short_common_password_gets_the_length_problem_only(app):
    make_user("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    refused = ann.post(
        "/me/password-update", json={"currentPassword": PASSWORD, "newPassword": "password"}
    )
    assert refused.status_code == 422
    assert refused.get_json()["errors"]["newPassword"] == ["Must be 10 to 128 characters long."]


@pytest.mark.parametrize("password", ["1234567890", "password123"])
def test_create_super_refuses_a_common_password(app, password):
    result = app.test_cli_runner().invoke(
        args=["create-super", "boss@example.com", "--password", password]
    )
    assert result.exit_code != 0
    assert "commonly used or breached" in result.output
    assert User.query.count() == 0
    ok = app.test_cli_runner().invoke(
        args=["create-super", "boss@example.com", "--password", PASSPHRASE]
    )
    assert ok.exit_code == 0, ok.output
