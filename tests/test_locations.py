"""/locations: public reads, super-only create/delete, owners change only the basics."""

from datetime import UTC, datetime

import pytest

from directory_api.models import Location, Membership, Vote
from directory_api.platform.extensions import db

from .conftest import PROBLEM, invite, register
from .factories import make_listing, make_location, make_region, make_vote, save

FIELDS = {
    "id",
    "slug",
    "name",
    "region",
    "directoryLocation",
    "description",
    "email",
    "phone",
    "address",
    "website",
    "createdAt",
    "updatedAt",
}
DETAILS = {
    "description": "By the sea.",
    "email": "harbour@example.com",
    "phone": "+44 1234 567890",
    "address": "1 Quay Street",
    "website": "https://harbour.example.com",
}


def slugs(response) -> list[str]:
    return [item["slug"] for item in response.get_json()["items"]]


def stored(slug: str) -> Location | None:
    db.session.rollback()
    return Location.query.filter_by(slug=slug).one_or_none()


@pytest.fixture
def north(app):
    return make_region("north")


@pytest.fixture
def locations(north):
    """Harbour (region north, with details) and Bay, for the shared world."""
    return {
        "harbour": make_location(
            "harbour", region=north, name="Harbour", directory_location=True, **DETAILS
        ),
        "bay": make_location("bay", name="Bay"),
    }


@pytest.fixture
def owner_client(clients):
    return clients["owner"]


@pytest.fixture
def listed(app):
    """Four locations over two regions, two of them directory locations."""
    north, south = make_region("north"), make_region("south")
    make_location("delta", region=north, name="Delta", directory_location=True)
    make_location("alpha", region=south, name="Alpha")
    make_location("charlie", region=north, name="Charlie")
    make_location("bravo", name="Bravo", directory_location=True)


# Reading


def test_list_items_show_exactly_the_contract_fields(client, world):
    response = client.get("/locations/")
    assert response.status_code == 200
    items = {item["slug"]: item for item in response.get_json()["items"]}
    harbour, bay = items["harbour"], items["bay"]
    assert set(harbour) == FIELDS
    assert harbour["id"] == str(world["harbour"].id)
    assert (harbour["name"], harbour["region"], harbour["directoryLocation"]) == (
        "Harbour",
        "north",
        True,
    )
    assert {key: harbour[key] for key in DETAILS} == DETAILS
    assert harbour["createdAt"].endswith("Z")
    assert harbour["updatedAt"].endswith("Z")
    assert set(bay) == FIELDS
    assert (bay["region"], bay["directoryLocation"], bay["email"]) == (None, False, None)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("directoryLocation=true", ["bravo", "delta"]),
        ("directoryLocation=1", ["bravo", "delta"]),
        ("directoryLocation=false", ["alpha", "charlie"]),
        ("directoryLocation=0", ["alpha", "charlie"]),
        ("region=north", ["charlie", "delta"]),
        ("region=nowhere", []),  # an unknown region is an empty page, not an error
        # The filters combine.
        ("region=north&directoryLocation=true", ["delta"]),
        ("region=north&directoryLocation=false", ["charlie"]),
        ("region=south&directoryLocation=1", []),
    ],
)
def test_filters(client, listed, query, expected):
    response = client.get(f"/locations/?{query}")
    assert response.status_code == 200
    assert slugs(response) == expected
    assert response.get_json()["total"] == len(expected)


def test_get_by_slug_and_id(client, world):
    by_slug = client.get("/locations/slug/harbour")
    assert by_slug.status_code == 200
    body = by_slug.get_json()
    assert set(body) == FIELDS
    assert (body["id"], body["name"], body["region"]) == (
        str(world["harbour"].id),
        "Harbour",
        "north",
    )
    by_id = client.get(f"/locations/id/{world['bay'].id}")
    assert by_id.status_code == 200
    assert (by_id.get_json()["slug"], by_id.get_json()["region"]) == ("bay", None)


# Creating


def test_super_creates_with_every_field(super_client, app):
    north = make_region("north")
    sent = {"name": "Harbour", "slug": "the-harbour", "region": "north", "directoryLocation": True}
    response = super_client.post("/locations/", json={**sent, **DETAILS})
    assert response.status_code == 201
    body = response.get_json()
    assert {key: body[key] for key in sent} == sent
    assert {key: body[key] for key in DETAILS} == DETAILS
    assert response.headers["Location"] == "/locations/slug/the-harbour"
    row = stored("the-harbour")
    assert (row.region_id, row.directory_location, row.email) == (
        north.id,
        True,
        "harbour@example.com",
    )


def test_create_resolves_the_region_slug(super_client, client, app):
    north = make_region("north")
    response = super_client.post("/locations/", json={"name": "Harbour", "region": "north"})
    assert response.status_code == 201
    assert response.get_json()["region"] == "north"
    assert stored("harbour").region_id == north.id
    assert slugs(client.get("/locations/?region=north")) == ["harbour"]


def test_create_with_an_unknown_region_is_422_on_region(super_client, app):
    make_region("north")
    response = super_client.post("/locations/", json={"name": "Harbour", "region": "nowhere"})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "region" in response.get_json()["errors"]
    assert Location.query.count() == 0


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None])
def test_directory_location_must_be_a_json_boolean(super_client, app, value):
    response = super_client.post(
        "/locations/", json={"name": "Harbour", "directoryLocation": value}
    )
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "directoryLocation" in response.get_json()["errors"]
    assert Location.query.count() == 0


def test_invalid_contact_fields_are_all_reported_at_once(super_client, app):
    response = super_client.post(
        "/locations/",
        json={
            "name": "Harbour",
            "email": "not-an-address",
            "website": "ftp://harbour.example.com",
            "phone": "call me maybe",
        },
    )
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert set(response.get_json()["errors"]) == {"email", "website", "phone"}
    assert Location.query.count() == 0


# Updating


def test_owner_changes_the_descriptive_fields(owner_client, world):
    change = {
        "name": "Old Harbour",
        "description": "Fish and ships.",
        "email": "Desk@Harbour.example.com",
        "phone": "01234 999",
        "address": "2 Quay Street",
        "website": "https://old-harbour.example.com",
    }
    response = owner_client.put("/locations/slug/harbour", json=change)
    assert response.status_code == 200
    body = response.get_json()
    assert {key: body[key] for key in change} == {**change, "email": "desk@harbour.example.com"}
    assert (body["slug"], body["region"], body["directoryLocation"]) == ("harbour", "north", True)
    row = stored("harbour")
    assert (row.name, row.email, row.website) == (
        "Old Harbour",
        "desk@harbour.example.com",
        "https://old-harbour.example.com",
    )


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        ({"slug": "new-harbour"}, ["slug"]),
        ({"region": None}, ["region"]),
        ({"directoryLocation": False}, ["directoryLocation"]),
        (
            {"slug": "new-harbour", "region": None, "directoryLocation": False},
            ["directoryLocation", "region", "slug"],
        ),
    ],
)
def test_owner_may_not_change_super_fields(owner_client, north, extra, refused):
    before = owner_client.get("/locations/slug/harbour").get_json()
    response = owner_client.put("/locations/slug/harbour", json={"name": "Renamed", **extra})
    assert response.status_code == 403
    assert response.mimetype == PROBLEM
    assert sorted(response.get_json()["fields"]) == refused
    for field in refused:
        assert field in response.get_json()["detail"]
    # Nothing changed, not even the allowed field sent alongside.
    row = stored("harbour")
    assert (row.slug, row.name, row.region_id, row.directory_location) == (
        "harbour",
        "Harbour",
        north.id,
        True,
    )
    assert owner_client.get("/locations/slug/harbour").get_json() == before
    assert stored("new-harbour") is None


def test_super_changes_everything_and_a_new_slug_renames(super_client, client, world):
    south = make_region("south")
    change = {
        "name": "New Harbour",
        "slug": "new-harbour",
        "region": "south",
        "directoryLocation": False,
        **DETAILS,
        "website": "https://new-harbour.example.com",
    }
    response = super_client.put("/locations/slug/harbour", json=change)
    assert response.status_code == 200
    body = response.get_json()
    assert {key: body[key] for key in change} == change
    assert body["id"] == str(world["harbour"].id)
    missing = client.get("/locations/slug/harbour")
    assert missing.status_code == 404
    assert missing.mimetype == PROBLEM
    assert client.get("/locations/slug/new-harbour").get_json()["name"] == "New Harbour"
    row = stored("new-harbour")
    assert (row.id, row.region_id, row.directory_location) == (world["harbour"].id, south.id, False)


def test_update_moves_updated_at_and_keeps_created_at(owner_client, world):
    world["harbour"].updated_at = datetime(2020, 1, 1, tzinfo=UTC)
    save(world["harbour"])
    before = owner_client.get("/locations/slug/harbour").get_json()
    assert before["updatedAt"] == "2020-01-01T00:00:00.000Z"
    response = owner_client.put("/locations/slug/harbour", json={"name": "Old Harbour"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["createdAt"] == before["createdAt"]
    assert body["updatedAt"] > before["updatedAt"]
    assert body["updatedAt"].endswith("Z")


@pytest.mark.parametrize(
    ("slug", "field", "value", "column"),
    [
        ("harbour", "region", None, "region_id"),
        ("bay", "directoryLocation", True, "directory_location"),
    ],
)
def test_super_sets_a_super_field(super_client, world, slug, field, value, column):
    response = super_client.put(f"/locations/slug/{slug}", json={field: value})
    assert response.status_code == 200
    assert response.get_json()[field] is value
    assert getattr(stored(slug), column) is value


def test_update_to_an_unknown_region_is_422(super_client, world, north):
    response = super_client.put("/locations/slug/harbour", json={"region": "nowhere"})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "region" in response.get_json()["errors"]
    assert stored("harbour").region_id == north.id


def test_slug_cannot_be_cleared(super_client, world):
    response = super_client.put("/locations/slug/harbour", json={"slug": None})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "slug" in response.get_json()["errors"]
    assert stored("harbour") is not None


def test_partial_update_keeps_the_other_fields(owner_client, world):
    response = owner_client.put("/locations/slug/harbour", json={"phone": "+1 555 0100"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["phone"] == "+1 555 0100"
    assert (body["name"], body["region"], body["directoryLocation"]) == ("Harbour", "north", True)
    assert {key: body[key] for key in DETAILS if key != "phone"} == {
        key: value for key, value in DETAILS.items() if key != "phone"
    }


def test_empty_update_changes_nothing(super_client, world):
    before = super_client.get("/locations/slug/harbour").get_json()
    response = super_client.put("/locations/slug/harbour", json={})
    assert response.status_code == 200
    assert {k: v for k, v in response.get_json().items() if k != "updatedAt"} == {
        k: v for k, v in before.items() if k != "updatedAt"
    }


@pytest.mark.parametrize("empty", [None, "", "   "])
def test_optional_fields_are_cleared_with_null_or_empty(owner_client, world, empty):
    response = owner_client.put("/locations/slug/harbour", json=dict.fromkeys(DETAILS, empty))
    assert response.status_code == 200
    body = response.get_json()
    assert {key: body[key] for key in DETAILS} == dict.fromkeys(DETAILS)
    row = stored("harbour")
    assert (row.description, row.email, row.phone, row.address, row.website) == (None,) * 5
    assert row.name == "Harbour"


@pytest.mark.parametrize("name", [None, "", "  "])
def test_name_cannot_be_cleared(super_client, world, name):
    response = super_client.put("/locations/slug/harbour", json={"name": name})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "name" in response.get_json()["errors"]
    assert stored("harbour").name == "Harbour"


def test_update_validation_reports_every_field(owner_client, world):
    response = owner_client.put(
        "/locations/slug/harbour",
        json={"email": "nope", "website": "not a url", "phone": "abc", "colour": "red"},
    )
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert set(response.get_json()["errors"]) == {"email", "website", "phone", "colour"}
    assert stored("harbour").email == DETAILS["email"]


def test_update_unknown_or_non_slug_location_is_404(super_client, world):
    for path in ("/locations/slug/nowhere", "/locations/slug/UPPER"):
        response = super_client.put(path, json={"name": "X"})
        assert response.status_code == 404, path
        assert response.mimetype == PROBLEM


# Deleting


def test_super_deletes_an_empty_location_and_its_memberships(super_client, clients, world):
    bay_id, harbour_id = world["bay"].id, world["harbour"].id
    former_owner = clients["other_owner"]
    assert former_owner.get("/me/").get_json()["roles"] == [{"location": "bay", "role": "owner"}]
    response = super_client.delete("/locations/slug/bay")
    assert response.status_code == 204
    assert response.data == b""
    assert stored("bay") is None
    assert Membership.query.filter_by(location_id=bay_id).count() == 0
    # Harbour's memberships are untouched.
    assert Membership.query.filter_by(location_id=harbour_id).count() == 2
    me = former_owner.get("/me/")
    assert me.status_code == 200
    assert me.get_json()["roles"] == []
    gone = super_client.get("/locations/slug/bay")
    assert gone.status_code == 404


def test_delete_unknown_location_is_404(super_client, world):
    for path in ("/locations/slug/nowhere", "/locations/slug/UPPER"):
        response = super_client.delete(path)
        assert response.status_code == 404, path
        assert response.mimetype == PROBLEM


def add_vote(location: Location) -> Vote:
    return make_vote(location, your_name="A", your_email="a@example.com", business_name="X")


@pytest.mark.parametrize(
    ("uses", "used_by"),
    [
        (("business",), {"businesses": 1}),
        (("employer",), {"employers": 1}),
        (("vote",), {"votes": 1}),
        (
            ("business", "business", "employer", "vote"),
            {"businesses": 2, "employers": 1, "votes": 1},
        ),
    ],
)
def test_delete_location_in_use_is_409_naming_the_users(super_client, world, uses, used_by):
    for number, use in enumerate(uses):
        if use == "vote":
            add_vote(world["bay"])
        else:
            make_listing(use, world["bay"], f"listing-{number}")
    response = super_client.delete("/locations/slug/bay")
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    body = response.get_json()
    assert body["usedBy"] == used_by
    for label in used_by:
        assert label in body["detail"]
    assert stored("bay") is not None
    assert Membership.query.filter_by(location_id=world["bay"].id).count() == 2


def test_deleting_a_location_voids_invitations_it_alone_gave(super_client, app):
    make_location("gone")
    user_id, token = invite(super_client, "new@example.com", "gone")
    assert super_client.delete("/locations/slug/gone").status_code == 204
    assert register(app.test_client(), user_id, token).status_code == 404
