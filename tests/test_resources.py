"""What every slugged resource shares (api/resources.py, slugs.py), tested once for each.

Regions, categories, socials, locations, businesses and employers: the paged, sorted list
and its 422s, the 404s of a lookup; the slug contract (derived from the name, -2, -3 …
when taken, an explicit slug kept or 409, 422 for what is not a slug, a rename that moves
the resource, and for locations the reserved words that would make a URL ambiguous); and
for those whose PUT and DELETE name their target in the body, how that target is named.
What is particular to one resource stays in its own file.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from directory_api.models import Business, Category, Employer, Location, Region, Social
from directory_api.platform.extensions import db

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
    fields: frozenset[str]  # exactly what an item shows
    absent: dict[str, Any] = field(default_factory=dict)  # fields not sent, as answered
    reserved: tuple[str, ...] = ()


def listing_kind(kind: str, plural: str, model: Any) -> Kind:
    """Businesses or employers of harbour (which the `kind` fixture creates)."""

    def make(slug: str) -> Any:
        return make_listing(kind, Location.query.filter_by(slug="harbour").one(), slug)

    absent = {"subcategory": None, "socials": [], "email": None}
    fields = {"subcategory", "description", "branch", "email", "phone", "address", "website"}
    return Kind(
        f"/locations/harbour/{plural}/",
        model,
        make,
        by_path=False,
        fields=BASE_FIELDS | fields | {"socials"},
        absent=absent,
    )


BASE_FIELDS = frozenset({"id", "slug", "name", "createdAt", "updatedAt"})
LOCATION_FIELDS = {"region", "directoryLocation", "description", "email", "phone", "address"}
KINDS = {
    "regions": Kind("/regions/", Region, make_region, by_path=True, fields=BASE_FIELDS),
    "categories": Kind(
        "/categories/",
        Category,
        make_category,
        by_path=False,
        fields=BASE_FIELDS | {"parent"},
        absent={"parent": None},
    ),
    "socials": Kind(
        "/socials/",
        Social,
        make_social,
        by_path=False,
        fields=BASE_FIELDS | {"url"},
        absent={"url": None},
    ),
    "locations": Kind(
        "/locations/",
        Location,
        make_location,
        by_path=True,
        fields=BASE_FIELDS | LOCATION_FIELDS | {"website"},
        absent={"region": None, "directoryLocation": False, "email": None},
        reserved=("slug", "id"),
    ),
    "businesses": listing_kind("business", "businesses", Business),
    "employers": listing_kind("employer", "employers", Employer),
}
RESERVING = [name for name, kind in KINDS.items() if kind.reserved]
TARGETED = [name for name, kind in KINDS.items() if not kind.by_path]


@pytest.fixture(params=list(KINDS))
def kind(request, app) -> Kind:
    if request.param in ("businesses", "employers"):
        make_location("harbour")
    return KINDS[request.param]


@pytest.fixture(params=RESERVING)
def reserving(request, app) -> Kind:
    return KINDS[request.param]


@pytest.fixture(params=TARGETED)
def targeted(request, app) -> Kind:
    """A resource whose PUT and DELETE name their target (id or slug) in the body."""
    if request.param in ("businesses", "employers"):
        make_location("harbour")
    return KINDS[request.param]


def update(client, kind: Kind, row: Any, changes: dict[str, Any]):
    if kind.by_path:
        return client.put(f"{kind.collection}slug/{row.slug}", json=changes)
    return client.put(kind.collection, json={"id": str(row.id), **changes})


def stored(kind: Kind, slug: str) -> int:
    return kind.model.query.filter_by(slug=slug).count()


def slugs(response) -> list[str]:
    assert response.status_code == 200, response.get_json()
    return [item["slug"] for item in response.get_json()["items"]]


# Reading


def test_the_list_is_public_sorted_by_name_and_paged(client, kind):
    # Names in another order than slugs, so the default order is seen to be the name's.
    for slug, name in (("alpha", "Delta"), ("bravo", "Charlie"), ("charlie", "Bravo")):
        kind.make(slug).name = name
    kind.make("delta").name = "Alpha"
    db.session.commit()
    response = client.get(f"{kind.collection}?perPage=3")
    assert slugs(response) == ["delta", "charlie", "bravo"]
    body = response.get_json()
    assert (body["page"], body["perPage"], body["total"]) == (1, 3, 4)
    for item in body["items"]:
        assert set(item) == kind.fields
        assert item["createdAt"].endswith("Z")
        assert item["updatedAt"].endswith("Z")
    link = response.headers["Link"]
    assert f'<{kind.collection}?perPage=3&page=2>; rel="next"' in link
    assert 'rel="prev"' not in link
    second = client.get(f"{kind.collection}?perPage=3&page=2")
    assert slugs(second) == ["alpha"]
    assert 'rel="prev"' in second.headers["Link"]
    assert 'rel="next"' not in second.headers["Link"]
    for order in ("slug", "-name"):
        assert slugs(client.get(f"{kind.collection}?sort={order}")) == [
            "alpha",
            "bravo",
            "charlie",
            "delta",
        ]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("perPage=0", "perPage"),
        ("perPage=101", "perPage"),
        ("page=0", "page"),
        ("page=abc", "page"),
        ("sort=password", "sort"),
        ("sort=name,-nope", "sort"),
        ("colour=red", "colour"),
        ("page=1&page=2", "page"),
    ],
)
def test_invalid_list_parameters_are_422_naming_the_parameter(client, kind, query, field):
    response = client.get(f"{kind.collection}?{query}")
    assert field in assert_problem(response, 422)["errors"]


def test_an_unknown_slug_or_id_and_a_non_uuid_are_404(client, kind):
    kind.make("known")
    for path in ("slug/nowhere", f"id/{uuid.uuid4()}", "id/123", "id/known", "slug/KNOWN"):
        assert_problem(client.get(f"{kind.collection}{path}"), 404)


# A resource's own list parameters, each refused as the one at fault.
OWN_LIST_PARAMETERS = [
    ("categories", "topLevel=maybe", "topLevel"),
    ("categories", "parent=Not%20A%20Slug", "parent"),
    ("categories", "sort=parent", "sort"),
    ("socials", "sort=url", "sort"),
    ("socials", "parent=x", "parent"),
    ("locations", "directoryLocation=maybe", "directoryLocation"),
    ("locations", "region=Not%20A%20Slug", "region"),
    ("locations", "sort=email", "sort"),
    ("locations", "sort=region", "sort"),
    ("locations", "sort=name,-directoryLocation", "sort"),
    ("locations", "directoryLocation=true&directoryLocation=false", "directoryLocation"),
]


@pytest.mark.parametrize(("name", "query", "field"), OWN_LIST_PARAMETERS)
def test_a_resources_own_invalid_list_parameters_are_422(client, app, name, query, field):
    response = client.get(f"{KINDS[name].collection}?{query}")
    assert field in assert_problem(response, 422)["errors"]


# Creating

# Refused by every resource's create, naming the field.
INVALID_BODIES = [
    ({}, "name"),
    ({"name": "   "}, "name"),
    ({"name": 5}, "name"),
    ({"name": "x" * 201}, "name"),
    ({"name": "Line\nbreak"}, "name"),
    ({"name": "Ok", "colour": "red"}, "colour"),
    ({"name": "Ok", "isSuper": True}, "isSuper"),
]
# Refused by one resource's create.
OWN_INVALID_BODIES = [
    ("categories", {"name": "Food", "parent": "Not A Slug"}, "parent"),
    ("socials", {"name": "Evil", "url": "javascript:alert(1)"}, "url"),
    ("socials", {"name": "Files", "url": "ftp://files.example"}, "url"),
    ("socials", {"name": "Bare", "url": "not a url"}, "url"),
    ("socials", {"name": "Long", "url": "https://x.example/" + "a" * 2048}, "url"),
    ("locations", {"name": "Harbour", "directory_location": True}, "directory_location"),
    ("locations", {"name": "Harbour", "slug": None}, "slug"),
    ("locations", {"name": "Harbour", "region": "Not A Slug"}, "region"),
    ("locations", {"name": "Harbour", "address": "Line\nbreak"}, "address"),
    ("locations", {"name": "Harbour", "description": "x" * 5001}, "description"),
]


def assert_refused_on(super_client, kind: Kind, body: dict[str, Any], field: str) -> None:
    response = super_client.post(kind.collection, json=body)
    assert field in assert_problem(response, 422)["errors"]
    assert kind.model.query.count() == 0


@pytest.mark.parametrize(("body", "field"), INVALID_BODIES)
def test_an_invalid_create_is_422_naming_the_field(super_client, kind, body, field):
    assert_refused_on(super_client, kind, body, field)


@pytest.mark.parametrize(("name", "body", "field"), OWN_INVALID_BODIES)
def test_a_resources_own_invalid_create_is_422_naming_the_field(super_client, name, body, field):
    assert_refused_on(super_client, KINDS[name], body, field)


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


# Naming the target in the body (PUT and DELETE on the collection)


@pytest.mark.parametrize("by", ["id", "slug"])
def test_delete_by_id_or_slug_then_it_is_gone(super_client, client, targeted, by):
    row = targeted.make("doomed")
    target = {"id": str(row.id)} if by == "id" else {"slug": "doomed"}
    response = super_client.delete(targeted.collection, json=target)
    assert response.status_code == 204
    assert response.data == b""
    assert stored(targeted, "doomed") == 0
    assert_problem(client.get(f"{targeted.collection}slug/doomed"), 404)
    assert_problem(super_client.delete(targeted.collection, json=target), 404)


@pytest.mark.parametrize(
    ("request_body", "status"),
    [
        ({"json": {}}, 422),  # names no target
        ({"data": "kept", "content_type": "text/plain"}, 415),
        ({}, 415),  # no body at all
    ],
    ids=["no-target", "text-body", "no-body"],
)
def test_a_delete_naming_no_target_deletes_nothing(super_client, targeted, request_body, status):
    targeted.make("kept")
    assert_problem(super_client.delete(targeted.collection, **request_body), status)
    assert stored(targeted, "kept") == 1


@pytest.mark.parametrize("target", [{"id": str(uuid.uuid4())}, {"slug": "nowhere"}])
def test_an_update_of_an_unknown_target_is_404(super_client, targeted, target):
    targeted.make("known")
    assert_problem(super_client.put(targeted.collection, json={**target, "name": "X"}), 404)


def test_an_update_naming_no_target_is_422_on_id(super_client, targeted):
    targeted.make("known")
    response = super_client.put(targeted.collection, json={"name": "Renamed"})
    assert "id" in assert_problem(response, 422)["errors"]
    assert targeted.model.query.filter_by(name="Renamed").count() == 0


@pytest.mark.parametrize(
    "query",
    [
        "",
        "page=3",
        "page=2&perPage=5",
        "perPage=5&page=2&sort=-name",
        "sort=name&perPage=5",
        "subcategory=caf%C3%A9s&sort=-name,createdAt",
        "a=1&a=2&page=4&b=x%26y%3Dz+w",
    ],
)
def test_page_links_encode_the_request_as_it_was(app, query):
    """Each page's URL is the request's, `page` set, encoded as a whole would be."""
    from urllib.parse import quote, urlencode

    from directory_api.platform.pagination import PATH_SAFE, page_url

    path = "/locations/harbour/businesses/search/caf\u00e9 &x"
    with app.test_request_context(quote(path) + "?" + query):
        from flask import request

        for page in (1, 2, 17):
            args = request.args.to_dict()
            args["page"] = str(page)
            expected = f"{quote(request.path, safe=PATH_SAFE)}?{urlencode(args)}"
            assert page_url()(page) == expected
