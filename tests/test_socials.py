"""/socials: public reads, super-only writes, http(s) URLs, targets named in the body, 409s."""

import pytest

from directory_api.models import Social

from .conftest import PROBLEM
from .factories import make_listing, make_location, make_social


def slugs(response) -> list[str]:
    return [s["slug"] for s in response.get_json()["items"]]


def count(slug: str) -> int:
    return Social.query.filter_by(slug=slug).count()


# Reading


def test_get_by_slug_and_id(client, app):
    social = make_social("mastodon", url="https://joinmastodon.org")
    by_slug = client.get("/socials/slug/mastodon")
    assert by_slug.status_code == 200
    body = by_slug.get_json()
    assert (body["id"], body["name"], body["url"]) == (
        str(social.id),
        "Mastodon",
        "https://joinmastodon.org",
    )
    by_id = client.get(f"/socials/id/{social.id}")
    assert by_id.status_code == 200
    assert by_id.get_json()["slug"] == "mastodon"


# Creating


def test_a_social_is_created_with_its_url(super_client, app):
    response = super_client.post(
        "/socials/", json={"name": "Cafés", "url": "https://cafes.example"}
    )
    assert response.status_code == 201
    body = response.get_json()
    assert (body["slug"], body["name"], body["url"]) == ("cafes", "Cafés", "https://cafes.example")
    stored = Social.query.filter_by(slug="cafes").one()
    assert (str(stored.id), stored.url) == (body["id"], "https://cafes.example")


# Updating: the body names the target


def test_update_by_id_changes_the_url(super_client, client, app):
    social = make_social("twitter", url="https://twitter.com")
    response = super_client.put("/socials/", json={"id": str(social.id), "url": "https://x.com"})
    assert response.status_code == 200
    body = response.get_json()
    assert (body["id"], body["slug"], body["url"]) == (str(social.id), "twitter", "https://x.com")
    assert client.get("/socials/slug/twitter").get_json()["url"] == "https://x.com"
    assert social.url == "https://x.com"


def test_update_by_current_slug_changes_only_what_is_sent(super_client, app):
    social = make_social("instagram")
    response = super_client.put("/socials/", json={"slug": "instagram", "name": "Insta"})
    assert response.status_code == 200
    body = response.get_json()
    assert (body["slug"], body["name"], body["url"]) == (
        "instagram",
        "Insta",
        "https://www.instagram.com",
    )
    assert (social.name, social.url) == ("Insta", "https://www.instagram.com")


def test_update_clears_the_url_with_null(super_client, app):
    social = make_social("instagram")
    response = super_client.put("/socials/", json={"slug": "instagram", "url": None})
    assert response.status_code == 200
    assert response.get_json()["url"] is None
    assert social.url is None


def test_update_refuses_a_non_http_url(super_client, app):
    social = make_social("instagram")
    response = super_client.put(
        "/socials/", json={"slug": "instagram", "url": "javascript:alert(1)"}
    )
    assert response.status_code == 422
    assert response.mimetype == PROBLEM
    assert "url" in response.get_json()["errors"]
    assert social.url == "https://www.instagram.com"


# Deleting: the body names the target


@pytest.mark.parametrize(("kind", "label"), [("business", "businesses"), ("employer", "employers")])
def test_delete_social_in_use_is_409_naming_the_user(super_client, app, kind, label):
    social = make_social("instagram")
    make_listing(
        kind, make_location("harbour"), "corner", socials=[(social, "https://x.example/a")]
    )
    response = super_client.delete("/socials/", json={"slug": "instagram"})
    assert response.status_code == 409
    assert response.mimetype == PROBLEM
    body = response.get_json()
    assert body["usedBy"] == {label: 1}
    assert label in body["detail"]
    assert count("instagram") == 1
