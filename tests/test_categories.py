"""/categories: public reads, super-only writes, two levels, targets named in the body, 409s."""

import pytest

from directory_api.models import Category

from .conftest import PROBLEM
from .factories import make_category, make_listing, make_location


def slugs(response) -> list[str]:
    return [c["slug"] for c in response.get_json()["items"]]


def count(slug: str) -> int:
    return Category.query.filter_by(slug=slug).count()


@pytest.fixture
def tree(app):
    """food > (cafes, bakeries); shops > books."""
    food = make_category("food")
    shops = make_category("shops")
    return {
        "food": food,
        "shops": shops,
        "cafes": make_category("cafes", "Cafés", parent=food),
        "bakeries": make_category("bakeries", parent=food),
        "books": make_category("books", parent=shops),
    }


# Reading


def test_parent_filter_lists_its_subcategories(client, tree):
    response = client.get("/categories/?parent=food")
    assert response.status_code == 200
    body = response.get_json()
    assert slugs(response) == ["bakeries", "cafes"]
    assert body["total"] == 2
    assert {c["parent"] for c in body["items"]} == {"food"}


def test_parent_filter_naming_an_unknown_slug_is_an_empty_page(client, tree):
    response = client.get("/categories/?parent=nowhere")
    assert response.status_code == 200
    body = response.get_json()
    assert (body["items"], body["total"]) == ([], 0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", ["food", "shops"]),
        ("1", ["food", "shops"]),
        ("false", ["bakeries", "books", "cafes"]),
        ("0", ["bakeries", "books", "cafes"]),
    ],
)
def test_top_level_filter(client, tree, value, expected):
    response = client.get(f"/categories/?topLevel={value}")
    assert response.status_code == 200
    assert slugs(response) == expected


def test_get_by_slug_and_id(client, tree):
    by_slug = client.get("/categories/slug/cafes")
    assert by_slug.status_code == 200
    body = by_slug.get_json()
    assert body["id"] == str(tree["cafes"].id)
    assert (body["name"], body["parent"]) == ("Cafés", "food")
    by_id = client.get(f"/categories/id/{tree['food'].id}")
    assert by_id.status_code == 200
    assert (by_id.get_json()["slug"], by_id.get_json()["parent"]) == ("food", None)


# Creating


def test_create_subcategory_shows_the_parent_slug(super_client, app):
    food = make_category("food")
    response = super_client.post("/categories/", json={"name": "Bakeries", "parent": "food"})
    assert response.status_code == 201
    assert response.get_json()["parent"] == "food"
    assert Category.query.filter_by(slug="bakeries").one().parent_id == food.id


def test_create_with_a_null_parent_is_top_level(super_client, app):
    response = super_client.post("/categories/", json={"name": "Food", "parent": None})
    assert response.status_code == 201
    assert response.get_json()["parent"] is None


def test_create_under_an_unknown_parent_is_422_on_parent(super_client, app):
    response = super_client.post("/categories/", json={"name": "Bakeries", "parent": "nowhere"})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "parent" in response.get_json()["errors"]
    assert Category.query.count() == 0


def test_create_under_a_subcategory_is_422(super_client, tree):
    response = super_client.post("/categories/", json={"name": "Espresso", "parent": "cafes"})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "parent" in response.get_json()["errors"]
    assert count("espresso") == 0


# Updating: the body names the target


def test_update_by_current_slug_changes_the_rest(super_client, app):
    food = make_category("food")
    response = super_client.put("/categories/", json={"slug": "food", "name": "Food & Drink"})
    assert response.status_code == 200
    assert (response.get_json()["slug"], response.get_json()["name"]) == ("food", "Food & Drink")
    assert (food.slug, food.name) == ("food", "Food & Drink")


def test_update_moves_a_category_under_a_parent(super_client, app):
    food = make_category("food")
    cafes = make_category("cafes")
    response = super_client.put("/categories/", json={"slug": "cafes", "parent": "food"})
    assert response.status_code == 200
    assert response.get_json()["parent"] == "food"
    assert cafes.parent_id == food.id


def test_category_cannot_be_its_own_parent(super_client, app):
    food = make_category("food")
    response = super_client.put("/categories/", json={"slug": "food", "parent": "food"})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "parent" in response.get_json()["errors"]
    assert food.parent_id is None


def test_category_with_subcategories_cannot_get_a_parent(super_client, tree):
    response = super_client.put("/categories/", json={"slug": "food", "parent": "shops"})
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "parent" in response.get_json()["errors"]
    assert tree["food"].parent_id is None


def test_null_parent_makes_a_subcategory_top_level(super_client, tree):
    response = super_client.put("/categories/", json={"slug": "books", "parent": None})
    assert response.status_code == 200
    assert response.get_json()["parent"] is None
    assert tree["books"].parent_id is None


def test_null_parent_on_a_subcategory_a_business_uses_is_409(super_client, tree):
    make_listing("business", make_location("harbour"), "corner-cafe", subcategory=tree["cafes"])
    response = super_client.put("/categories/", json={"slug": "cafes", "parent": None})
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    assert response.get_json()["usedBy"] == {"businesses": 1}
    assert tree["cafes"].parent_id == tree["food"].id


# Deleting: the body names the target


def test_delete_category_with_subcategories_is_409(super_client, app):
    food = make_category("food")
    make_category("cafes", parent=food)
    response = super_client.delete("/categories/", json={"slug": "food"})
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    body = response.get_json()
    assert body["usedBy"] == {"subcategories": 1}
    assert "subcategories" in body["detail"]
    assert Category.query.count() == 2


@pytest.mark.parametrize(("kind", "label"), [("business", "businesses"), ("employer", "employers")])
def test_delete_subcategory_in_use_is_409_naming_the_user(super_client, tree, kind, label):
    make_listing(kind, make_location("harbour"), "corner-cafe", subcategory=tree["cafes"])
    response = super_client.delete("/categories/", json={"id": str(tree["cafes"].id)})
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    body = response.get_json()
    assert body["usedBy"] == {label: 1}
    assert label in body["detail"]
    assert count("cafes") == 1
