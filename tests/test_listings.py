"""/locations/:slug/businesses and …/employers: one shape, tested for both kinds."""

import hashlib
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import insert, text

from directory_api.models import Business, Employer, Listing, ListingSocial, utcnow
from directory_api.platform import page_queries
from directory_api.platform.extensions import db
from directory_api.platform.timeouts import unbounded
from directory_api.search import fold, search_text

from .conftest import PG_URL, PROBLEM, assert_problem, forget_answers, statements_run
from .factories import (
    make_category,
    make_listing,
    make_location,
    make_social,
    make_vote,
)

KINDS = [("businesses", "business", Business), ("employers", "employer", Employer)]


@pytest.fixture(params=KINDS, ids=["businesses", "employers"])
def kind(request):
    return request.param


@pytest.fixture
def world(world):
    """The shared world, with a category tree and two socials."""
    food = make_category("food", "Food & Drink")
    return world | {
        "food": food,
        "cafes": make_category("cafes", "Cafés", parent=food),
        "bakeries": make_category("bakeries", "Bakeries", parent=food),
        "instagram": make_social("instagram"),
        "facebook": make_social("facebook", "https://www.facebook.com"),
    }


def url(kind, location="harbour", rest=""):
    return f"/locations/{location}/{kind[0]}/{rest}"


# Reading


def test_list_is_public_scoped_to_the_location_and_sorted(client, world, kind):
    for name in ("Zebra", "Apple", "Mango"):
        make_listing(
            kind[1],
            world["harbour"],
            name.lower(),
            name=name,
            subcategory=world["cafes"],
            socials=[(world["instagram"], f"https://instagram.com/{name}")],
        )
    make_listing(kind[1], world["hill"], "elsewhere")
    response = client.get(url(kind))
    assert response.status_code == 200
    body = response.get_json()
    assert [item["name"] for item in body["items"]] == ["Apple", "Mango", "Zebra"]
    assert body["total"] == 3
    item = body["items"][0]
    assert set(item) == {
        "id",
        "slug",
        "name",
        "subcategory",
        "description",
        "branch",
        "email",
        "phone",
        "address",
        "website",
        "socials",
        "createdAt",
        "updatedAt",
    }
    assert item["subcategory"] == "cafes"
    assert item["socials"] == [{"social": "instagram", "url": "https://instagram.com/Apple"}]
    descending = client.get(url(kind) + "?sort=-name").get_json()["items"]
    assert descending[0]["name"] == "Zebra"


def test_the_other_kind_is_not_listed(client, world, kind):
    other = "employer" if kind[1] == "business" else "business"
    make_listing(other, world["harbour"], "not-me")
    assert client.get(url(kind)).get_json()["total"] == 0


def test_subcategory_filter(client, world, kind):
    make_listing(kind[1], world["harbour"], "a", subcategory=world["cafes"])
    make_listing(kind[1], world["harbour"], "b", subcategory=world["bakeries"])
    assert [
        i["slug"] for i in client.get(url(kind) + "?subcategory=cafes").get_json()["items"]
    ] == ["a"]
    assert client.get(url(kind) + "?subcategory=nothing").get_json()["total"] == 0
    assert client.get(url(kind) + "?subcategory=Not%20A%20Slug").status_code == 422


def test_the_list_statements_built_once_answer_each_request_with_its_own_values(
    client, world, kind
):
    """A list page's statements are built once per sort and reused (page_queries'
    STATEMENTS): requests for other locations, subcategories and pages, interleaved, each
    get their own rows."""
    make_listing(kind[1], world["harbour"], "a", subcategory=world["cafes"])
    make_listing(kind[1], world["harbour"], "b", subcategory=world["bakeries"])
    make_listing(kind[1], world["harbour"], "c", subcategory=world["cafes"])
    make_listing(kind[1], world["hill"], "d", subcategory=world["cafes"])

    def slugs(location, query):
        page = client.get(url(kind, location) + query).get_json()
        return [item["slug"] for item in page["items"]], page["total"]

    for _ in range(2):
        assert slugs("harbour", "?sort=-slug") == (["c", "b", "a"], 3)
        assert slugs("hill", "?sort=-slug") == (["d"], 1)
        assert slugs("harbour", "?sort=-slug&subcategory=cafes") == (["c", "a"], 2)
        assert slugs("hill", "?sort=-slug&subcategory=bakeries") == ([], 0)
        assert slugs("harbour", "?sort=-slug&perPage=1&page=2") == (["b"], 3)
        assert slugs("harbour", "?sort=-slug&perPage=2&page=2") == (["a"], 3)


def test_unknown_location_is_404(client, world, kind):
    for rest in ("", "slug/a", "id/00000000-0000-0000-0000-000000000000", "search/abc"):
        response = client.get(url(kind, "nowhere", rest))
        assert response.status_code == 404, rest
        assert response.mimetype == PROBLEM


def test_get_by_slug_and_id_within_the_location(client, world, kind):
    here = make_listing(kind[1], world["harbour"], "same", name="Here")
    there = make_listing(kind[1], world["hill"], "same", name="There")
    assert client.get(url(kind, rest="slug/same")).get_json()["name"] == "Here"
    assert client.get(url(kind, "hill", "slug/same")).get_json()["name"] == "There"
    assert client.get(url(kind, rest=f"id/{here.id}")).get_json()["slug"] == "same"
    # The id of another location's listing is not found here.
    assert client.get(url(kind, rest=f"id/{there.id}")).status_code == 404
    assert client.get(url(kind, rest="slug/missing")).status_code == 404
    assert client.get(url(kind, rest="id/12")).status_code == 404


def test_a_list_page_costs_the_same_queries_whatever_its_size(app, client, world, kind):
    links = [
        (world["instagram"], "https://i.example/a"),
        (world["facebook"], "https://f.example/a"),
    ]
    for number in range(30):
        # Every other listing lists its socials the other way round; pages keep each order.
        make_listing(
            kind[1],
            world["harbour"],
            f"l{number}",
            subcategory=world["cafes"],
            socials=links if number % 2 else links[::-1],
        )
    with statements_run() as statements:
        counts = {}
        for per_page in (1, 30, 100):
            statements.clear()
            response = client.get(url(kind) + f"?perPage={per_page}")
            assert response.status_code == 200
            for item in response.get_json()["items"]:
                order = ["instagram", "facebook"]
                if int(item["slug"][1:]) % 2 == 0:
                    order.reverse()
                assert [link["social"] for link in item["socials"]] == order
                assert item["subcategory"] == "cafes"
            counts[per_page] = len(statements)
        search_counts = {}
        client.get(url(kind, rest="search/cafes"))  # SQLite: the process samples trigrams once
        for per_page in (1, 30):
            statements.clear()
            assert client.get(url(kind, rest=f"search/l?perPage={per_page}")).status_code == 422
            statements.clear()
            client.get(url(kind, rest=f"search/cafes?perPage={per_page}"))
            search_counts[per_page] = len(statements)
    assert counts[1] == counts[30] == counts[100] <= 4
    assert search_counts[1] == search_counts[30] <= 4


# Writing: who may (every 401 and 403 is test_role_matrix.py's)


@pytest.mark.parametrize("who", ["admin", "owner", "super"])
def test_the_locations_staff_create_update_and_delete(clients, kind, who):
    client = clients[who]
    assert client.post(url(kind), json={"name": "Place"}).status_code == 201
    assert kind[2].query.one().name == "Place"
    assert client.put(url(kind), json={"slug": "place", "name": "Renamed"}).status_code == 200
    assert kind[2].query.one().name == "Renamed"
    assert client.delete(url(kind), json={"slug": "place"}).status_code == 204
    assert kind[2].query.count() == 0


def test_staff_of_one_location_cannot_write_through_another(clients, world, kind):
    make_listing(kind[1], world["hill"], "theirs")
    # The harbour admin names hill's listing through harbour's URL: not found there.
    assert (
        clients["admin"].put(url(kind), json={"slug": "theirs", "name": "Mine"}).status_code == 404
    )
    assert clients["admin"].post(url(kind, "hill"), json={"name": "Mine"}).status_code == 403


# Writing: what


def test_create_with_everything(clients, world, kind):
    body = {
        "name": "Café Zürich",
        "subcategory": "cafes",
        "description": "Coffee\nand cake",
        "branch": "Harbour Front",
        "email": "Hello@Cafe.example",
        "phone": "+44 1234 567890",
        "address": "1 Quay",
        "website": "https://cafe.example",
        "socials": [
            {"social": "instagram", "url": "https://instagram.com/cz"},
            {"social": "facebook", "url": "https://facebook.com/cz"},
        ],
    }
    response = clients["admin"].post(url(kind), json=body)
    assert response.status_code == 201
    created = response.get_json()
    assert created["slug"] == "cafe-zurich"
    assert created["email"] == "hello@cafe.example"
    assert [s["social"] for s in created["socials"]] == ["instagram", "facebook"]
    assert response.headers["Location"] == f"/locations/harbour/{kind[0]}/slug/cafe-zurich"
    assert clients["anonymous"].get(response.headers["Location"]).get_json() == created


def test_slugs_are_unique_per_location_and_kind(clients, world, kind):
    make_listing(kind[1], world["hill"], "bakery")
    other = "employer" if kind[1] == "business" else "business"
    make_listing(other, world["harbour"], "bakery")
    boss = clients["super"]
    assert boss.post(url(kind), json={"name": "Bakery"}).get_json()["slug"] == "bakery"
    assert boss.post(url(kind), json={"name": "Bakery"}).get_json()["slug"] == "bakery-2"
    taken = boss.post(url(kind), json={"name": "X", "slug": "bakery"})
    assert taken.status_code == 409


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "X", "subcategory": "food"}, "subcategory"),
        ({"name": "X", "subcategory": "nothing"}, "subcategory"),
        ({"name": "X", "socials": [{"social": "myspace", "url": "https://m.example"}]}, "socials"),
        (
            {
                "name": "X",
                "socials": [
                    {"social": "instagram", "url": "https://a.example"},
                    {"social": "instagram", "url": "https://b.example"},
                ],
            },
            "socials",
        ),
        (
            {"name": "X", "socials": [{"social": "instagram", "url": "javascript:alert(1)"}]},
            "socials",
        ),
        ({"name": "X", "socials": [{"social": "instagram"}]}, "socials"),
        (
            {"name": "X", "socials": [{"social": "instagram", "url": "https://a.example", "x": 1}]},
            "socials",
        ),
        ({"name": "X", "socials": "instagram"}, "socials"),
        (
            {
                "name": "X",
                "socials": [
                    {"social": "instagram", "url": f"https://a.example/{n}"} for n in range(21)
                ],
            },
            "socials",
        ),
        ({"name": "X", "email": "nope"}, "email"),
        ({"name": "X", "location": "hill"}, "location"),
        ({}, "name"),
    ],
)
def test_invalid_bodies_are_422_naming_the_field(clients, world, kind, body, field):
    response = clients["super"].post(url(kind), json=body)
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert field in response.get_json()["errors"]
    assert kind[2].query.count() == 0


def test_socials_are_replaced_as_a_whole_and_kept_when_absent(clients, world, kind):
    make_listing(
        kind[1], world["harbour"], "place", socials=[(world["instagram"], "https://i.example/old")]
    )
    client = clients["owner"]
    kept = client.put(url(kind), json={"slug": "place", "branch": "North"}).get_json()
    assert kept["socials"] == [{"social": "instagram", "url": "https://i.example/old"}]
    replaced = client.put(
        url(kind),
        json={
            "slug": "place",
            "socials": [
                {"social": "facebook", "url": "https://f.example/new"},
                {"social": "instagram", "url": "https://i.example/new"},
            ],
        },
    ).get_json()
    assert replaced["socials"] == [
        {"social": "facebook", "url": "https://f.example/new"},
        {"social": "instagram", "url": "https://i.example/new"},
    ]
    cleared = client.put(url(kind), json={"slug": "place", "socials": None}).get_json()
    assert cleared["socials"] == []
    assert ListingSocial.query.count() == 0


def test_an_update_must_name_a_target_of_this_location(clients, world, kind):
    make_listing(kind[1], world["harbour"], "place")
    client = clients["super"]
    assert client.put(url(kind), json={"name": "No target"}).status_code == 422
    assert client.put(url(kind), json={"slug": "missing", "name": "X"}).status_code == 404


def test_delete_removes_the_social_links(clients, world, kind):
    make_listing(
        kind[1], world["harbour"], "place", socials=[(world["instagram"], "https://i.example")]
    )
    assert clients["admin"].delete(url(kind), json={"slug": "place"}).status_code == 204
    assert ListingSocial.query.count() == 0
    assert clients["admin"].delete(url(kind), json={"slug": "place"}).status_code == 404


def test_an_employer_with_votes_cannot_be_deleted(clients, world):
    employer = make_listing("employer", world["harbour"], "acme")
    make_vote(
        world["harbour"],
        employer_id=employer.id,
        your_name="A",
        your_email="a@example.com",
        business_name="Acme",
        vote_body="Good",
    )
    response = clients["owner"].delete("/locations/harbour/employers/", json={"slug": "acme"})
    assert response.status_code == 409
    assert response.get_json()["usedBy"] == {"votes": 1}
    assert Employer.query.count() == 1


# Search


def search(client, kind, term, query=""):
    return client.get(url(kind, rest=f"search/{term}{query}"))


def names(response):
    assert response.status_code == 200, response.get_json()
    return [item["name"] for item in response.get_json()["items"]]


def test_search_ignores_accents_and_case(client, world, kind):
    make_listing(kind[1], world["harbour"], "a", name="Café Zürich")
    make_listing(kind[1], world["harbour"], "b", name="CAFE ROMA")
    assert names(search(client, kind, "cafe")) == ["CAFE ROMA", "Café Zürich"]
    assert names(search(client, kind, "ZÜRICH")) == ["Café Zürich"]
    assert names(search(client, kind, "  zurich  ")) == ["Café Zürich"]


def test_every_word_must_occur_somewhere(client, world, kind):
    make_listing(kind[1], world["harbour"], "a", name="Blue Door", subcategory=world["cafes"])
    make_listing(kind[1], world["harbour"], "b", name="Blue Window", branch="Old Town")
    make_listing(kind[1], world["harbour"], "c", name="Red Door", description="A blue awning")
    assert names(search(client, kind, "blue cafes")) == ["Blue Door"]  # name + subcategory
    assert names(search(client, kind, "blue old")) == ["Blue Window"]  # name + branch
    assert names(search(client, kind, "door blue")) == ["Blue Door", "Red Door"]
    assert names(search(client, kind, "blue green")) == []


def test_wildcards_are_literal(client, world, kind):
    make_listing(kind[1], world["harbour"], "a", name="50% Off")
    make_listing(kind[1], world["harbour"], "b", name="500 Off")
    make_listing(kind[1], world["harbour"], "c", name="snake_case")
    make_listing(kind[1], world["harbour"], "d", name="snakescase")
    make_listing(kind[1], world["harbour"], "e", name="back\\slash")
    assert names(search(client, kind, "50%25")) == ["50% Off"]
    assert names(search(client, kind, "e_c")) == ["snake_case"]
    assert names(search(client, kind, "k\\s")) == ["back\\slash"]
    assert names(search(client, kind, "%25%25")) == []


def test_relevance_orders_exact_then_prefix_then_contains_then_the_rest(client, world, kind):
    for slug, name, description in [
        ("d", "Alpha Other", "mentions bread"),
        ("c", "Wholemeal Bread Co", None),
        ("b2", "Bread Basket", None),
        ("b1", "Bread Cakes", None),
        ("a", "Bread", None),
    ]:
        make_listing(kind[1], world["harbour"], slug, name=name, description=description)
    assert names(search(client, kind, "bread")) == [
        "Bread",
        "Bread Basket",
        "Bread Cakes",
        "Wholemeal Bread Co",
        "Alpha Other",
    ]


def test_search_term_length_and_filters(client, world, kind):
    make_listing(kind[1], world["harbour"], "a", name="Tea Room", subcategory=world["cafes"])
    make_listing(kind[1], world["harbour"], "b", name="Tea Bakery", subcategory=world["bakeries"])
    for term in ("x", "%20x%20", "y" * 101):
        response = search(client, kind, term)
        assert response.status_code == 422
        assert "term" in response.get_json()["errors"]
    assert names(search(client, kind, "tea", "?subcategory=bakeries")) == ["Tea Bakery"]
    paged = search(client, kind, "tea", "?perPage=1&page=2")
    assert names(paged) == ["Tea Room"]
    assert paged.get_json()["total"] == 2
    assert 'rel="prev"' in paged.headers["Link"]
    assert search(client, kind, "tea", "?sort=-name").get_json()["items"][0]["name"] == "Tea Room"


def test_a_search_counts_its_matches_in_the_pass_that_pages_them(client, world, kind):
    for number in range(25):
        make_listing(kind[1], world["harbour"], f"shop-{number:02}", name=f"Shop {number:02}")
    make_listing(kind[1], world["harbour"], "mill", name="Mill")
    with statements_run() as run:
        pages = {
            page: search(client, kind, "shop", f"?perPage=10&page={page}") for page in (1, 3, 4)
        }
    # The statements with the search's filter (not only its page's order).
    searched = [
        executed.sql
        for executed in run
        if "search_text LIKE" in executed.sql or "instr(listings.search_text" in executed.sql
    ]

    assert [len(pages[page].get_json()["items"]) for page in (1, 3, 4)] == [10, 5, 0]
    assert {pages[page].get_json()["total"] for page in (1, 3, 4)} == {25}
    assert names(pages[3])[0] == "Shop 20"
    backwards = search(client, kind, "shop", "?perPage=10&page=2&sort=-name").get_json()
    assert [item["name"] for item in backwards["items"]][::9] == ["Shop 14", "Shop 05"]
    assert backwards["total"] == 25
    # Pages 1 and 3: one statement each runs the search; page 4, past the end, counts too.
    assert len(searched) == 4, searched
    assert search(client, kind, "nothing-like-it").get_json() == {
        "items": [],
        "page": 1,
        "perPage": 20,
        "total": 0,
    }


def test_a_search_term_with_line_breaks_pages_with_an_encoded_link(client, world, kind):
    """Regression (fuzzing): the Link header repeated the decoded path, line break and all,
    and building the response failed with a 500."""
    make_listing(kind[1], world["harbour"], "a", name="Tea Room")
    response = search(client, kind, "%0A%09tea%C3%BC%20r%0D", "?perPage=1")
    assert response.status_code == 200
    first = response.headers["Link"].split(";")[0]
    assert first == f"</locations/harbour/{kind[0]}/search/%0A%09tea%C3%BC%20r%0D?perPage=1&page=1>"
    terms = [("%0Ab%0Ac", 200), ("%C2%A0a%C2%A0", 422), ("%1Cab%1C", 200), ("a%1C", 422)]
    for term, status in terms:  # what str.strip() trims, as the document's pattern says
        assert search(client, kind, term).status_code == status, term


@pytest.mark.parametrize("term", ["tea%00room", "%00tea", "tea%1Froom", "tea%7F", "%7F%7F"])
def test_a_search_term_with_control_characters_is_422_on_every_database(client, world, kind, term):
    """Regression: a NUL answered 503 on SQLite (its FTS query failed) and 422 on PostgreSQL."""
    make_listing(kind[1], world["harbour"], "a", name="Tea Room")
    response = search(client, kind, term)
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert response.get_json()["errors"] == {"term": ["Contains control characters."]}


def test_renaming_a_subcategory_updates_search(super_client, world, kind):
    make_listing(kind[1], world["harbour"], "a", name="Corner", subcategory=world["cafes"])
    response = super_client.put("/categories/", json={"slug": "cafes", "name": "Coffee Shops"})
    assert response.status_code == 200
    assert names(search(super_client, kind, "coffee shops")) == ["Corner"]
    assert names(search(super_client, kind, "cafes")) == []


def search_and_plan(client, path: str, marker: str) -> tuple[list[str], list[str]]:
    """The slugs a search answers, and the query plan of its first statement containing
    `marker` (besides a plain COUNT): the one that searches."""
    with statements_run() as run:
        response = client.get(path)
    statement, parameters = next(
        executed
        for executed in run
        if marker in executed.sql and not executed.sql.startswith("SELECT count(")
    )
    explain = "EXPLAIN QUERY PLAN " if db.engine.dialect.name == "sqlite" else "EXPLAIN "
    with db.engine.connect() as connection:
        rows = connection.exec_driver_sql(explain + statement, parameters).all()
    return [item["slug"] for item in response.get_json()["items"]], [str(row) for row in rows]


@pytest.mark.skipif(
    not PG_URL, reason="pg_trgm is PostgreSQL's; CI runs this in its PostgreSQL pass"
)
def test_search_on_100k_businesses_uses_the_trigram_index(app, client):
    location = make_location("big")
    with unbounded(db.session.connection()):  # 100k rows into a GIN index: not a request
        db.session.execute(
            text(
                "INSERT INTO listings (id, kind, location_id, slug, name, search_name, search_text,"
                " created_at, updated_at)"
                " SELECT gen_random_uuid(), 'business', :location, 'b-' || g, 'Business ' || g,"
                " 'business ' || g, 'business ' || g || ' ' || md5(g::text), now(), now()"
                " FROM generate_series(1, 100000) AS g"
            ),
            {"location": location.id},
        )
    db.session.commit()
    db.session.execute(text("ANALYZE listings"))
    db.session.commit()
    needle = hashlib.md5(b"77777").hexdigest()[:10]  # noqa: S324  (test data, not security)
    slugs, plan = search_and_plan(client, f"/locations/big/businesses/search/{needle}", "LIKE")
    assert slugs == ["b-77777"]
    assert any("ix_listings_search_trgm" in line for line in plan), "\n".join(plan)


@pytest.mark.skipif(bool(PG_URL), reason="the FTS5 index is SQLite's (PostgreSQL uses pg_trgm)")
def test_search_on_sqlite_goes_through_the_fts5_trigram_index(app, client):
    location = make_location("big")
    for number in range(50):
        make_listing("business", location, f"b-{number}", name=f"Shop {number}")
    slugs, plan = search_and_plan(client, "/locations/big/businesses/search/shop%2042", "MATCH")
    assert slugs == ["b-42"]
    assert any("listings_fts VIRTUAL TABLE INDEX" in line for line in plan), "\n".join(plan)


def test_the_index_is_asked_for_the_least_common_trigrams():
    from directory_api.search import fts_query, rarest_trigrams

    def index_query(words, shares):
        return fts_query(rarest_trigrams(words, shares))

    shares = {"ery": 1, "eve": 0.9, "ver": 0.95, "old": 0.1, "bak": 0.04, "ake": 0.03, "ker": 0.04}
    # "golden": a trigram never seen (share 0); "bakery": its rarest, never "ery".
    assert index_query(["golden", "bakery"], shares) == '"gol" AND "ake"'
    # A word whose every trigram is in most texts is left to LIKE: the index narrows
    # nothing there, and reading most rows through it costs twice reading them in place.
    assert index_query(["golden", "every"], shares) == '"gol"'
    assert index_query(["every"], shares) is None
    assert index_query(["every"], {**shares, "eve": 0.2}) == '"eve"'
    assert index_query(["ab", "say"], {}) == '"say"'  # too short for a trigram: LIKE alone
    assert index_query(["bake", "bakery"], shares) == '"ake"'  # asked once
    assert index_query(["ab"], {}) is None
    assert index_query(['a"b'], {}) == '"a""b"'  # quoted as FTS5 reads strings


@pytest.mark.skipif(bool(PG_URL), reason="the FTS5 index is SQLite's (PostgreSQL uses pg_trgm)")
def test_sqlite_search_leaves_out_what_every_listing_holds_and_finds_the_same(app, client):
    from directory_api.search import TrigramShares

    location = make_location("big")
    for number in range(40):
        make_listing(
            "business", location, f"b-{number}", name=f"Shop {number}", description="Open every day"
        )
    make_listing("business", location, "bakery", name="Golden Bakery", description="Every day")
    make_listing("business", location, "gilded", name="Gilded Bakery", description="Closed")
    app.extensions["search_trigram_shares"] = TrigramShares()  # sampled now, from these
    with statements_run() as run:
        response = client.get("/locations/big/businesses/search/golden%20EVERY")
    assert [item["slug"] for item in response.get_json()["items"]] == ["bakery"]
    [asked] = [executed.parameters for executed in run if "MATCH" in executed.sql]
    trigrams = [value for value in asked if isinstance(value, str) and value.startswith('"')]
    assert trigrams == ['"gol"']  # "golden"'s rarest; "every" (in every text) is LIKE's
    with statements_run() as run:
        response = client.get("/locations/big/businesses/search/every%20day")
    assert len(response.get_json()["items"]) == 20
    assert response.get_json()["total"] == 41
    assert not [executed for executed in run if "MATCH" in executed.sql]  # nothing narrows


def test_the_search_index_follows_renames_and_deletes(app, clients, world, kind):
    client = clients["super"]
    assert client.post(url(kind), json={"name": "Marble Arch"}).status_code == 201
    renamed = client.put(url(kind), json={"slug": "marble-arch", "name": "Granite Gate"})
    assert renamed.status_code == 200
    assert slugs_found(client, kind, "granite") == ["marble-arch"]
    assert slugs_found(client, kind, "marble") == []
    assert client.delete(url(kind), json={"slug": "marble-arch"}).status_code == 204
    assert slugs_found(client, kind, "granite") == []
    if db.engine.dialect.name == "sqlite":
        with db.engine.connect() as connection:
            rows, indexed, listings = (
                connection.exec_driver_sql(count).scalar()
                for count in (
                    "SELECT count(*) FROM listings_fts_rows",
                    "SELECT count(*) FROM listings_fts",
                    "SELECT count(*) FROM listings",
                )
            )
        assert rows == indexed == listings  # nothing left behind by the delete


@pytest.mark.skipif(bool(PG_URL), reason="migration 0024 changes SQLite's index alone")
def test_migration_0024_keeps_every_listing_searchable_both_ways(tmp_path):
    from flask_migrate import downgrade, upgrade

    from directory_api import create_app

    app = create_app(
        "testing",
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'old.sqlite3'}",
        SESSION_FILE_DIR=str(tmp_path / "sessions"),
    )

    def found(term: str) -> list[str]:
        listings = app.test_client().get(f"/locations/harbour/businesses/search/{term}")
        return [item["slug"] for item in listings.get_json()["items"]]

    with app.app_context():
        upgrade(revision="0023")
        harbour = make_location("harbour")
        for slug, name in (("mill", "Harbour Mill"), ("works", "Iron Works")):
            # As the code of then wrote them: the model's later columns (0025) left out.
            db.session.execute(
                insert(Listing.__table__).values(
                    id=uuid.uuid4(),
                    kind="business",
                    location_id=harbour.id,
                    slug=slug,
                    name=name,
                    search_name=fold(name),
                    search_text=search_text(name, None, None, None),
                    created_at=utcnow(),
                    updated_at=utcnow(),
                )
            )
        db.session.commit()
        db.session.remove()
        upgrade()
        assert found("mill") == ["mill"]
        assert found("harbour") == ["mill"]
        make_listing("business", harbour, "yard", name="Mill Yard")  # through the new triggers
        assert found("mill") == ["yard", "mill"]
        db.session.remove()
        downgrade(revision="0023")  # 0003's shape (for the code of then), filled again
        with db.engine.connect() as connection:
            ids = connection.exec_driver_sql(
                """SELECT listing_id FROM listings_fts WHERE listings_fts MATCH '"mill"'"""
            ).scalars()
            assert len(set(ids)) == 2
            triggers = connection.exec_driver_sql(
                "SELECT count(*) FROM sqlite_master WHERE name LIKE 'listings_fts_%' "
                "AND type = 'trigger'"
            ).scalar()
        assert triggers == 3
        db.engine.dispose()


def slugs_found(client, kind, term: str) -> list[str]:
    response = client.get(f"{url(kind)}search/{term}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return [item["slug"] for item in response.get_json()["items"]]


def listed_total(client, kind, location="harbour", query=""):
    return client.get(url(kind, location) + query).get_json()["total"]


def test_stored_counts_follow_every_create_and_delete(clients, world, kind):
    from directory_api.models import ListingCount

    client = clients["super"]
    for name in ("One", "Two", "Three"):
        assert client.post(url(kind), json={"name": name}).status_code == 201
    assert client.post(url(kind, "hill"), json={"name": "Elsewhere"}).status_code == 201
    assert client.delete(url(kind), json={"slug": "two"}).status_code == 204
    assert listed_total(client, kind) == 2
    assert listed_total(client, kind, "hill") == 1
    stored = {(c.location_id, c.kind): c.total for c in ListingCount.query}
    assert stored[(world["harbour"].id, kind[1])] == 2
    # A filtered list still counts exactly.
    assert listed_total(client, kind, query="?subcategory=cafes") == 0


def test_recount_repairs_counts_after_a_bulk_load(app, client, world, kind):
    from directory_api.models import ListingCount

    make_listing(kind[1], world["harbour"], "a")
    db.session.execute(ListingCount.__table__.update().values(total=99))
    db.session.commit()
    assert listed_total(client, kind) == 99  # the stored count is what the list shows
    result = app.test_cli_runner().invoke(args=["listings", "recount"])
    assert result.exit_code == 0, result.output
    assert listed_total(client, kind) == 1


def test_search_follows_renames_and_deletes(clients, world, kind):
    client = clients["owner"]
    client.post(url(kind), json={"name": "Lighthouse Diner"})
    assert names(search(client, kind, "lighthouse")) == ["Lighthouse Diner"]
    client.put(url(kind), json={"slug": "lighthouse-diner", "name": "Harbour Diner"})
    assert names(search(client, kind, "lighthouse")) == []
    assert names(search(client, kind, "harbour diner")) == ["Harbour Diner"]
    client.delete(url(kind), json={"slug": "lighthouse-diner"})
    assert names(search(client, kind, "harbour diner")) == []


def shops_and_a_mill(shops: int) -> None:
    """A location "big" listing `shops` businesses named "Shop N" and one "Mill"."""
    location = make_location("big")
    for number in range(shops):
        make_listing("business", location, f"shop-{number}", name=f"Shop {number}")
    make_listing("business", location, "mill", name="Mill")


def test_searches_that_read_many_listings_spend_an_allowance_per_address(app_factory):
    """A search for a word most of a large location's listings hold reads them all; anyone
    could send one after another, spelt anew past the kept answers. Those (and only those)
    spend RATELIMIT_BROAD_SEARCHES_PER_IP."""
    app = app_factory(RATELIMIT_BROAD_SEARCHES_PER_IP="2/minute", RATELIMIT_BROAD_SEARCH_ROWS=10)
    with app.app_context():
        shops_and_a_mill(12)
        # Elsewhere: "shop" is then in under a quarter of all texts, so SQLite's index is
        # asked for it too.
        elsewhere = make_location("elsewhere")
        for number in range(40):
            make_listing("business", elsewhere, f"other-{number}", name=f"Other {number}")
    client = app.test_client()
    path = "/locations/big/businesses/search/"

    for per_page in range(1, 5):  # one hit: no allowance spent (each a URL not kept)
        narrow = client.get(path + f"mill?perPage={per_page}")
        assert [item["slug"] for item in narrow.get_json()["items"]] == ["mill"]
        assert narrow.headers["X-RateLimit-Remaining"] == "2"
    first = client.get(path + "shop")  # 12 hits of 13
    assert first.status_code == 200
    assert first.get_json()["total"] == 12
    assert client.get(path + "shop?page=2").status_code == 200
    # The answer this process kept: no work, nothing spent, past the allowance too.
    again = client.get(path + "shop")
    assert (again.status_code, again.data) == (200, first.data)
    # Spent: the next search waits, whatever it would cost (that is known after the work).
    limited = client.get(path + "mill%20x")
    problem = assert_problem(limited, 429)
    assert "searches that read many listings from one address" in problem["detail"]
    assert int(limited.headers["Retry-After"]) > 0

    # Words too short for an index are looked for in every listing of the location: a
    # search with no hit still read all 13. So did one whose other word found 12 of them
    # (review: "shop zq" read every shop for no hit).
    for address, terms in (("10.9.8.7", ("zq", "q%20z")), ("10.9.8.9", ("shop%20zq", "zq%20shop"))):
        elsewhere = {"REMOTE_ADDR": address}
        for term in terms:
            assert client.get(path + term, environ_base=elsewhere).get_json()["total"] == 0
        assert_problem(client.get(path + "mill", environ_base=elsewhere), 429)
    assert client.get(path + "mill", environ_base={"REMOTE_ADDR": "10.9.8.8"}).status_code == 200


def test_a_search_reads_its_allowance_once_unless_it_spends_it(app_factory, monkeypatch):
    """The allowance is tested before the work and shown in the headers after it: one read
    of the store (Redis in production) for both, and a second only after a broad search
    counted in it (platform/rate_windows.py). The headers show the same figures."""
    from directory_api.platform.extensions import limiter

    app = app_factory(RATELIMIT_BROAD_SEARCHES_PER_IP="2/minute", RATELIMIT_BROAD_SEARCH_ROWS=3)
    with app.app_context():
        shops_and_a_mill(4)
    client = app.test_client()
    reads = []
    read = limiter.storage.get_moving_window
    monkeypatch.setattr(
        limiter.storage, "get_moving_window", lambda *args: reads.append(args) or read(*args)
    )

    def searched(term: str) -> tuple[int, str | None, int]:
        reads.clear()
        answer = client.get(f"/locations/big/businesses/search/{term}")
        return answer.status_code, answer.headers.get("X-RateLimit-Remaining"), len(reads)

    assert searched("mill") == (200, "2", 1)  # narrow: tested, nothing spent
    assert searched("shop") == (200, "1", 2)  # broad: tested, spent, read again
    assert searched("mill?perPage=3") == (200, "1", 1)
    assert searched("shop?page=2") == (200, "0", 2)
    assert searched("mill?perPage=4") == (429, "0", 1)  # refused: its wait from that read


def test_broad_searches_of_both_kinds_spend_one_allowance_once_each(app_factory):
    """Review: the two kinds' search views share their module and name, under which
    Flask-Limiter files a route's limits: one limit object serves both, counted once."""
    app = app_factory(RATELIMIT_BROAD_SEARCHES_PER_IP="3/minute", RATELIMIT_BROAD_SEARCH_ROWS=2)
    with app.app_context():
        location = make_location("big")
        for kind in ("business", "employer"):
            for number in range(3):
                make_listing(kind, location, f"{kind}-{number}", name=f"Shop {number}")
    client = app.test_client()
    first = client.get("/locations/big/businesses/search/shop")
    second = client.get("/locations/big/employers/search/shop")
    remaining = [response.headers["X-RateLimit-Remaining"] for response in (first, second)]
    assert remaining == ["2", "1"]
    assert client.get("/locations/big/employers/search/shop?perPage=5").status_code == 200
    assert_problem(client.get("/locations/big/businesses/search/shop?perPage=5"), 429)


@pytest.mark.skipif(not PG_URL, reason="pg_trgm's rule; CI's PostgreSQL pass runs it")
def test_a_word_pg_trgm_cannot_use_is_a_broad_search(app_factory):
    """Review: pg_trgm takes trigrams from runs of letters and digits only, so "x.s" or
    "---" is checked on every row, like a word under three characters."""
    app = app_factory(RATELIMIT_BROAD_SEARCHES_PER_IP="1/minute", RATELIMIT_BROAD_SEARCH_ROWS=4)
    with app.app_context():
        location = make_location("big")
        for number in range(5):
            make_listing("business", location, f"shop-{number}", name=f"Shop {number}")
    client = app.test_client()
    for address, term in (("10.0.0.1", "---"), ("10.0.0.2", "x.s")):
        at = {"REMOTE_ADDR": address}
        found = client.get(f"/locations/big/businesses/search/{term}", environ_base=at)
        assert found.get_json()["total"] == 0
        assert_problem(client.get("/locations/big/businesses/search/zqx", environ_base=at), 429)
    at = {"REMOTE_ADDR": "10.0.0.3"}
    for per_page in range(1, 4):  # indexed, no hit: nothing spent (each a URL not kept)
        path = f"/locations/big/businesses/search/zqx?perPage={per_page}"
        assert client.get(path, environ_base=at).status_code == 200


def test_a_location_too_small_for_a_broad_search_is_searched_past_the_allowance(app_factory):
    """No search of a location listing fewer than RATELIMIT_BROAD_SEARCH_ROWS reads that
    many: it neither spends the allowance nor waits for it."""
    app = app_factory(RATELIMIT_BROAD_SEARCHES_PER_IP="1/minute", RATELIMIT_BROAD_SEARCH_ROWS=4)
    with app.app_context():
        for slug, listed in (("small", 3), ("big", 4)):
            location = make_location(slug)
            for number in range(listed):
                make_listing("business", location, f"shop-{number}", name=f"Shop {number}")
    client = app.test_client()
    searched = [
        client.get(f"/locations/small/businesses/search/{term}")
        for term in ("shop", "sh", "op", "hop", "shop 1", "shop 2")
    ]
    assert {response.status_code for response in searched} == {200}
    assert not [response for response in searched if "X-RateLimit-Limit" in response.headers]

    spent = client.get("/locations/big/businesses/search/shop")  # 4 hits of 4
    assert (spent.status_code, spent.headers["X-RateLimit-Remaining"]) == (200, "0")
    assert_problem(client.get("/locations/big/businesses/search/shop%201"), 429)
    assert client.get("/locations/small/businesses/search/shop%203").status_code == 200


# Deep pages start where the process saw them start (issue 19) --------------------------------


@pytest.fixture
def many(world, kind):
    """45 listings, names repeating (ties break on id), created a second apart."""
    clock = utcnow()
    for number in range(45):
        make_listing(
            kind[1],
            world["harbour"],
            f"place-{number:02}",
            name=f"Place {number % 7}",
            created_at=clock + timedelta(seconds=number % 11),
        )


def walk(client, kind, query: str) -> list[list[str]]:
    """Every page of the list, in order: slugs per page."""
    pages = []
    for page in range(1, 7):
        response = client.get(url(kind) + f"?perPage=10&page={page}&{query}")
        assert response.status_code == 200, response.get_json()
        assert response.get_json()["total"] == 45
        pages.append([item["slug"] for item in response.get_json()["items"]])
    return pages


def found_from_a_start(client, path: str) -> bool:
    """Whether the page was found from a remembered start (a row comparison on the sort
    key), rather than by skipping the rows before it (OFFSET), when its answer was not
    kept from before."""
    forget_answers()
    with statements_run() as run:
        assert client.get(path).status_code == 200
    return any("(listings.name, listings.id) >" in executed.sql for executed in run)


@pytest.mark.parametrize("sort", ["", "sort=-name", "sort=createdAt", "sort=-name,-createdAt"])
def test_pages_found_from_a_remembered_start_are_the_pages(client, many, kind, sort):
    page_queries.PAGE_STARTS.entries.clear()
    walked = walk(client, kind, sort)  # each page after the one before: starts remembered
    forget_answers()  # the pages' answers: asked again, each is found from its start
    asked_again = walk(client, kind, sort)
    page_queries.PAGE_STARTS.entries.clear()
    # Asked in reverse order, with nothing remembered, every page is found by skipping rows.
    backwards = {}
    for page in range(6, 0, -1):
        page_queries.PAGE_STARTS.entries.clear()
        forget_answers()
        query = f"?perPage=10&page={page}&{sort}"
        backwards[page] = [
            item["slug"] for item in client.get(url(kind) + query).get_json()["items"]
        ]
    assert walked == asked_again == [backwards[page] for page in range(1, 7)]
    assert len({slug for page in walked for slug in page}) == 45 and walked[-1] == []


def test_a_deep_page_seen_before_is_found_without_skipping_rows(client, many, kind):
    deep = url(kind) + "?perPage=10&page=4"
    page_queries.PAGE_STARTS.entries.clear()
    assert not found_from_a_start(client, deep)  # the first time, it skips 30 rows
    assert found_from_a_start(client, deep)  # asked again: from its first row
    assert found_from_a_start(client, url(kind) + "?perPage=10&page=5")  # and the next one


def test_a_change_forgets_where_pages_started(clients, many, kind):
    client = clients["anonymous"]
    before = walk(client, kind, "")
    assert clients["owner"].post(url(kind), json={"name": "Place 0"}).status_code == 201
    after = [client.get(url(kind) + f"?perPage=10&page={page}").get_json() for page in (3, 4)]
    page_queries.PAGE_STARTS.entries.clear()
    forget_answers()
    fresh = [client.get(url(kind) + f"?perPage=10&page={page}").get_json() for page in (3, 4)]
    assert after == fresh
    assert [item["slug"] for item in after[0]["items"]] != before[2]


@pytest.mark.parametrize("rest", ["", "search/shop", "slug/shop"])
def test_a_location_that_is_not_there_is_404_on_every_read(client, kind, rest):
    body = assert_problem(client.get(url(kind, "nowhere", rest)), 404)
    assert body["detail"] == "No location 'nowhere'."


def test_a_slow_search_reads_its_allowance_again_once_a_count_expired(app_factory, monkeypatch):
    """A window kept from the test before the work is read again for the headers when its
    oldest count expired meanwhile (a slow request): the headers show the allowance now."""
    import time

    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    app = app_factory(RATELIMIT_BROAD_SEARCHES_PER_IP="2/second", RATELIMIT_BROAD_SEARCH_ROWS=3)
    with app.app_context():
        shops_and_a_mill(4)
    slow = []

    # Registered last, so run before Flask-Limiter's header hook: the view's work "took"
    # the seconds queued.
    @app.after_request
    def take_time(response):
        clock[0] += slow.pop() if slow else 0
        return response

    client = app.test_client()
    broad = client.get("/locations/big/businesses/search/shop")  # counted at t=1000.0
    assert broad.headers["X-RateLimit-Remaining"] == "1"
    clock[0] = 1000.5
    slow.append(3.0)  # the count expires while this search runs
    narrow = client.get("/locations/big/businesses/search/mill")
    assert narrow.status_code == 200
    assert narrow.headers["X-RateLimit-Remaining"] == "2"
