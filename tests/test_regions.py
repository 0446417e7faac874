"""/regions: public reads, super-only writes, slugs, paging and the 409 on delete."""

from directory_api.models import Region

from .conftest import statements_run
from .factories import make_location, make_region


def test_sort_descending_and_ties_break_on_id(client, app):
    ids = sorted(str(make_region(f"r{i}", name="Same").id) for i in range(5))
    names = client.get("/regions/?sort=-slug&perPage=100").get_json()["items"]
    assert [r["slug"] for r in names] == ["r4", "r3", "r2", "r1", "r0"]
    # Equal names: the id orders them, so consecutive pages never overlap or skip.
    pages = [client.get(f"/regions/?sort=name&perPage=2&page={p}").get_json() for p in (1, 2, 3)]
    seen = [r["id"] for page in pages for r in page["items"]]
    assert seen == ids


def test_get_by_slug_and_id(client, app):
    region = make_region("north")
    by_slug = client.get("/regions/slug/north")
    assert by_slug.status_code == 200
    assert by_slug.get_json()["id"] == str(region.id)
    assert client.get(f"/regions/id/{region.id}").get_json()["slug"] == "north"


def test_update_renames_and_changes_only_what_is_sent(super_client, client, app):
    make_region("north")
    response = super_client.put("/regions/slug/north", json={"name": "Far North"})
    assert response.status_code == 200
    assert (response.get_json()["slug"], response.get_json()["name"]) == ("north", "Far North")
    assert client.get("/regions/slug/north").get_json()["name"] == "Far North"
    assert super_client.put("/regions/slug/north", json={}).get_json()["name"] == "Far North"


def test_update_of_an_unknown_region_is_404(super_client, app):
    assert super_client.put("/regions/slug/nowhere", json={"name": "X"}).status_code == 404


def test_delete(super_client, app):
    make_region("north")
    response = super_client.delete("/regions/slug/north")
    assert response.status_code == 204
    assert response.data == b""
    assert super_client.delete("/regions/slug/north").status_code == 404


def test_delete_region_in_use_is_409_naming_the_user(super_client, app):
    region = make_region("north")
    make_location("harbour", region=region)
    response = super_client.delete("/regions/slug/north")
    assert response.status_code == 409
    body = response.get_json()
    assert body["usedBy"] == {"locations": 1}
    assert "locations" in body["detail"]
    assert Region.query.count() == 1


def test_a_page_and_its_total_are_one_statement_and_past_the_end_still_counts(client, app):
    for number in range(5):
        make_region(f"r{number}")
    with statements_run() as run:
        second = client.get("/regions/?perPage=2&page=2").get_json()
    past = client.get("/regions/?perPage=2&page=9").get_json()
    counted = len(run)

    assert [item["slug"] for item in second["items"]] == ["r2", "r3"]
    assert second["total"] == 5 and set(second["items"][0]) == {
        "id",
        "slug",
        "name",
        "createdAt",
        "updatedAt",
    }
    assert counted == 1
    assert past["items"] == [] and past["total"] == 5
