"""flask create-super and flask seed-demo."""

from directory_api.demo import DEMO_USERS
from directory_api.models import (
    Business,
    Category,
    Employer,
    ListingCount,
    ListingSocial,
    Location,
    Membership,
    Region,
    Social,
    User,
    Vote,
)
from directory_api.schemas.passwords import password_problems

from .conftest import complete_reset, reset_token, signed_in, start_reset
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
    start_reset(app.test_client(), "ann@example.com")
    old_link = reset_token("ann@example.com")  # whoever holds it must not set a super's password
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
    assert complete_reset(app.test_client(), old_link).status_code == 404


MODELS = (
    Region,
    Category,
    Social,
    Location,
    Business,
    Employer,
    ListingSocial,
    ListingCount,
    Vote,
    User,
    Membership,
)


def seed(app) -> str:
    result = app.test_cli_runner().invoke(args=["seed-demo"])
    assert result.exit_code == 0, result.output
    return result.output


def stored(app) -> dict:
    """Every demo row as it is stored: counts per model, the stored counts, the passwords."""
    with app.app_context():
        return {
            "rows": [model.query.count() for model in MODELS],
            "listing counts": sorted((c.kind, c.total) for c in ListingCount.query),
            "vote counts": sorted(Employer.query.with_entities(Employer.slug, Employer.vote_count)),
            "passwords": sorted(User.query.with_entities(User.email, User.password_hash)),
        }


def test_seed_demo_loads_a_few_hundred_listings_and_a_second_run_changes_nothing(app):
    first = seed(app)
    assert "Demo data loaded:" in first
    for user in DEMO_USERS:
        assert f'{user.email}  password "{user.password}"' in first
        assert password_problems(user.password, user.email) == []  # the rules for real users
    before = stored(app)
    assert "Demo data already loaded; nothing added." in seed(app)
    assert stored(app) == before
    counts = dict(zip(MODELS, before["rows"], strict=True))
    assert counts[Region] == 4 and counts[Social] >= 2 and counts[Location] == 2
    assert counts[Business] + counts[Employer] >= 300 and counts[Employer] >= 20
    assert Category.query.filter(Category.parent_id.is_not(None)).count() >= 2
    # The stored counts agree with the rows (they were recounted after the bulk insert).
    assert sum(total for _kind, total in before["listing counts"]) == (
        counts[Business] + counts[Employer]
    )


def test_seeded_listings_page_and_rank_in_search(app, client):
    seed(app)
    assert client.get("/regions/").get_json()["total"] == 4
    assert client.get("/categories/slug/cafes").get_json()["parent"] == "food-drink"
    page = client.get("/locations/harbour-town/businesses/?page=2")
    body = page.get_json()
    assert (body["page"], len(body["items"])) == (2, 20) and body["total"] >= 200
    assert 'rel="next"' in page.headers["Link"]
    found = client.get("/locations/harbour-town/businesses/search/harbour?perPage=100")
    names = [item["name"].casefold() for item in found.get_json()["items"]]
    # Names that start with the term, then names that contain it, then mere mentions.
    ranks = [0 if n.startswith("harbour") else 1 if "harbour" in n else 2 for n in names]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1, 2}


def test_demo_owner_and_admin_sign_in_and_see_votes_in_every_state(app):
    seed(app)
    owner, admin = DEMO_USERS
    staff = signed_in(app, owner.email, owner.password)
    assert {role["location"] for role in staff.get("/me/").get_json()["roles"]} == {
        "harbour-town",
        "hill-village",
    }
    votes = staff.get("/locations/harbour-town/votes/?perPage=100").get_json()["items"]
    assert any(not vote["active"] for vote in votes)  # pending
    assert any(vote["active"] and not vote["confirmed"] for vote in votes)
    assert any(vote["active"] and vote["confirmed"] for vote in votes)
    assert any(vote["duplicateOf"] for vote in votes)
    assert any(vote["redacted"] and vote["yourEmail"] is None for vote in votes)
    assert {vote["type"] for vote in votes} == {"employer", "btob", "btoc"}
    results = app.test_client().get("/locations/harbour-town/votes/results").get_json()
    assert results["items"][0]["votes"] > 1
    helper = signed_in(app, admin.email, admin.password)
    assert helper.get("/locations/harbour-town/votes/summary").status_code == 200
    assert helper.get("/locations/hill-village/votes/summary").status_code == 403


def test_seed_demo_refuses_production(app):
    app.config["ENV_NAME"] = "production"
    result = app.test_cli_runner().invoke(args=["seed-demo"])
    assert result.exit_code == 1
    assert "passwords are public: not in production" in result.output
    assert User.query.count() == 0 and Location.query.count() == 0
