"""flask create-super and flask seed-demo."""

from directory_api.models import Business, Category, Employer, Location, Region, Social, User

from .conftest import signed_in
from .factories import PASSWORD, make_user


def test_create_super_then_sign_in(app):
    result = app.test_cli_runner().invoke(
        args=["create-super", "Boss@Example.com", "--password", "a long passphrase"]
    )
    assert result.exit_code == 0, result.output
    user = User.query.one()
    assert (user.email, user.is_super, user.status) == ("boss@example.com", True, "active")
    assert "a long passphrase" not in user.password_hash
    client = signed_in(app, "boss@example.com", "a long passphrase")
    assert client.get("/me/").get_json()["isSuper"] is True


def test_create_super_prompts_for_the_password(app):
    result = app.test_cli_runner().invoke(
        args=["create-super", "boss@example.com"], input="a long passphrase\na long passphrase\n"
    )
    assert result.exit_code == 0, result.output
    assert User.query.one().is_super


def test_create_super_refuses_weak_passwords_and_bad_addresses(app):
    runner = app.test_cli_runner()
    short = runner.invoke(args=["create-super", "boss@example.com", "--password", "short"])
    assert short.exit_code != 0
    assert "10 to 128" in short.output
    same = runner.invoke(
        args=["create-super", "boss@example.com", "--password", "boss@example.com"]
    )
    assert same.exit_code != 0
    bad = runner.invoke(args=["create-super", "not-an-address", "--password", "a long passphrase"])
    assert bad.exit_code != 0
    assert User.query.count() == 0


def test_create_super_refuses_an_existing_account_and_keeps_its_password(app):
    make_user("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    result = app.test_cli_runner().invoke(
        args=["create-super", "ANN@example.com", "--password", "a long passphrase"]
    )
    assert result.exit_code == 1
    assert "ann@example.com has an account already; its password is unchanged" in result.output
    assert "--reset-password" in result.output
    assert ann.get("/me/").get_json()["isSuper"] is False  # still signed in, not a super
    signed_in(app, "ann@example.com", PASSWORD)


def test_create_super_refuses_an_existing_account_before_asking_for_a_password(app):
    make_user("ann@example.com")
    result = app.test_cli_runner().invoke(args=["create-super", "ann@example.com"], input="")
    assert result.exit_code == 1
    assert "Password" not in result.output and "--reset-password" in result.output


def test_create_super_with_reset_password_replaces_it_and_makes_a_super(app):
    make_user("ann@example.com")
    ann = signed_in(app, "ann@example.com")
    result = app.test_cli_runner().invoke(
        args=["create-super", "ann@example.com", "--reset-password"],
        input="a long passphrase\na long passphrase\n",
    )
    assert result.exit_code == 0, result.output
    assert "ann@example.com is a super; its password was replaced." in result.output
    assert ann.get("/me/").status_code == 401  # the old password's sessions are over
    response = app.test_client().post(
        "/auth/login", json={"email": "ann@example.com", "password": PASSWORD}
    )
    assert response.status_code == 401
    client = signed_in(app, "ann@example.com", "a long passphrase")
    assert client.get("/me/").get_json()["isSuper"] is True


MODELS = (Region, Category, Social, Location, Business, Employer)


def test_seed_demo_is_idempotent(app):
    runner = app.test_cli_runner()
    counts = []
    for _ in range(2):
        result = runner.invoke(args=["seed-demo"])
        assert result.exit_code == 0, result.output
        counts.append([model.query.count() for model in MODELS])
    assert counts[0] == counts[1]
    seeded = dict(zip(MODELS, counts[0], strict=True))
    assert seeded[Region] == 4 and seeded[Social] >= 2
    assert seeded[Location] == 2 and seeded[Business] >= 2 and seeded[Employer] >= 2
    assert Category.query.filter(Category.parent_id.is_not(None)).count() >= 2


def test_seeded_data_is_served(app, client):
    app.test_cli_runner().invoke(args=["seed-demo"])
    assert client.get("/regions/").get_json()["total"] == 4
    assert client.get("/categories/slug/cafes").get_json()["parent"] == "food-drink"
