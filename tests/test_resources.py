"""The slug contract every slugged resource shares (api/resources.py, slugs.py), once for each.

Regions, categories, socials, locations, businesses and employers: a slug derived from the
name (-2, -3 … when taken), an explicit slug kept (409 when taken), 422 for what is not a
slug, a rename by slug that moves the resource, and for locations the reserved words that
would make a URL ambiguous. What is particular to one resource stays in its own file.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from directory_api.models import Business, Category, Employer, Location, Region, Social

from .conftest import assert_problem
from .factories import (
    make_category,
    make_listing,
    make_location,
    make_region,
    make_social,
)


@dataclass(frozen=True)
class Kind:
    """How to create, store and update one slugged resource."""

    collection: str  # where POST creates; "<collection>slug/<slug>" reads one
    model: Any
    make: Callable[[str], Any]  # a stored row with this slug
    by_path: bool  # PUT /…/slug/<slug>; else PUT <collection> naming the id in the body
    absent: dict[str, Any] = field(default_factory=dict)  # fields not sent, as answered
    reserved: tuple[str, ...] = ()


def listing_kind(kind: str, plural: str, model: Any) -> Kind:
    """Businesses or employers of harbour (which the `kind` fixture creates)."""

    def make(slug: str) -> Any:
        return make_listing(kind, Location.query.filter_by(slug="harbour").one(), slug)

    absent = {"subcategory": None, "socials": [], "email": None}
    return Kind(f"/locations/harbour/{plural}/", model, make, by_path=False, absent=absent)


KINDS = {
    "regions": Kind("/regions/", Region, make_region, by_path=True),
    "categories": Kind(
        "/categories/", Category, make_category, by_path=False, absent={"parent": None}
    ),
    "socials": Kind("/socials/", Social, make_social, by_path=False, absent={"url": None}),
    "locations": Kind(
        "/locations/",
        Location,
        make_location,
        by_path=True,
        absent={"region": None, "directoryLocation": False, "email": None},
        reserved=("slug", "id"),
    ),
    "businesses": listing_kind("business", "businesses", Business),
    "employers": listing_kind("employer", "employers", Employer),
}
RESERVING = [name for name, kind in KINDS.items() if kind.reserved]


@pytest.fixture(params=list(KINDS))
def kind(request, app) -> Kind:
    if request.param in ("businesses", "employers"):
        make_location("harbour")
    return KINDS[request.param]


@pytest.fixture(params=RESERVING)
def reserving(request, app) -> Kind:
    return KINDS[request.param]


def update(client, kind: Kind, row: Any, changes: dict[str, Any]):
    if kind.by_path:
        return client.put(f"{kind.collection}slug/{row.slug}", json=changes)
    return client.put(kind.collection, json={"id": str(row.id), **changes})


def stored(kind: Kind, slug: str) -> int:
    return kind.model.query.filter_by(slug=slug).count()


# Creating


def test_a_slug_is_derived_from_the_trimmed_name(super_client, client, kind):
    response = super_client.post(kind.collection, json={"name": "  Café Zürich  "})
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert (body["slug"], body["name"]) == ("cafe-zurich", "Café Zürich")
    assert {key: body[key] for key in kind.absent} == kind.absent
    assert response.headers["Location"] == f"{kind.collection}slug/cafe-zurich"
    assert client.get(response.headers["Location"]).get_json() == body
    assert str(kind.model.query.filter_by(slug="cafe-zurich").one().id) == body["id"]


def test_a_taken_derived_slug_gets_the_next_free_suffix(super_client, kind):
    kind.make("cafe-zurich")
    second = super_client.post(kind.collection, json={"name": "Café Zürich"})
    assert second.status_code == 201
    assert second.get_json()["slug"] == "cafe-zurich-2"
    assert second.headers["Location"] == f"{kind.collection}slug/cafe-zurich-2"
    third = super_client.post(kind.collection, json={"name": "CAFE zurich"})
    assert third.get_json()["slug"] == "cafe-zurich-3"


def test_an_explicit_slug_is_kept(super_client, kind):
    response = super_client.post(kind.collection, json={"name": "Some Name", "slug": "chosen"})
    assert response.status_code == 201
    assert response.get_json()["slug"] == "chosen"
    assert response.headers["Location"] == f"{kind.collection}slug/chosen"


def test_an_explicit_slug_that_is_taken_is_409(super_client, kind):
    kind.make("taken")
    before = kind.model.query.count()
    response = super_client.post(kind.collection, json={"name": "Other", "slug": "taken"})
    assert "slug" in assert_problem(response, 409)["errors"]
    assert kind.model.query.count() == before


@pytest.mark.parametrize(
    "body",
    [
        {"name": "Ok", "slug": "Not A Slug"},
        {"name": "Ok", "slug": "a" * 101},
        {"name": "Ok", "slug": ""},
        {"name": "!!!"},  # nothing to derive a slug from
    ],
    ids=["not-a-slug", "too-long", "empty", "underivable"],
)
def test_what_is_not_a_slug_is_422_on_slug(super_client, kind, body):
    before = kind.model.query.count()
    response = super_client.post(kind.collection, json=body)
    assert "slug" in assert_problem(response, 422)["errors"]
    assert kind.model.query.count() == before


# Renaming


def test_a_new_slug_moves_the_resource(super_client, client, kind):
    row = kind.make("old-slug")
    response = update(super_client, kind, row, {"slug": "new-slug", "name": "New Name"})
    assert response.status_code == 200, response.get_json()
    assert (response.get_json()["slug"], response.get_json()["name"]) == ("new-slug", "New Name")
    assert_problem(client.get(f"{kind.collection}slug/old-slug"), 404)
    moved = client.get(f"{kind.collection}slug/new-slug").get_json()
    assert (moved["id"], moved["name"]) == (str(row.id), "New Name")


def test_a_rename_to_a_taken_slug_is_409_and_keeping_its_own_is_fine(super_client, kind):
    row = kind.make("mine")
    kind.make("theirs")
    assert_problem(update(super_client, kind, row, {"slug": "theirs"}), 409)
    assert (stored(kind, "mine"), stored(kind, "theirs")) == (1, 1)
    same = update(super_client, kind, row, {"slug": "mine"})
    assert same.status_code == 200
    assert same.get_json()["slug"] == "mine"


# Reserved words (a location's /slug/… and /id/… would be ambiguous)


def test_a_reserved_slug_is_422_when_given(super_client, reserving):
    row = reserving.make("existing")
    before = reserving.model.query.count()
    for slug in reserving.reserved:
        created = super_client.post(reserving.collection, json={"name": "Lookup", "slug": slug})
        assert "slug" in assert_problem(created, 422)["errors"]
        renamed = update(super_client, reserving, row, {"slug": slug})
        assert "slug" in assert_problem(renamed, 422)["errors"]
    assert reserving.model.query.count() == before
    assert stored(reserving, "existing") == 1


def test_a_name_like_a_reserved_word_gets_another_slug(super_client, client, reserving):
    for word in reserving.reserved:
        name = word.title()
        response = super_client.post(reserving.collection, json={"name": name})
        assert response.status_code == 201
        slug = response.get_json()["slug"]
        assert slug not in reserving.reserved
        assert slug.startswith(word)
        assert response.headers["Location"] == f"{reserving.collection}slug/{slug}"
        assert client.get(f"{reserving.collection}slug/{slug}").get_json()["name"] == name
