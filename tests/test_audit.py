"""The audit log (API.md 10): one entry per privileged write, role change and sign-in event,
in the transaction of the change, with personal data redacted; read by supers (all) and
owners (their location's), never changed through the API.

Who may read which list is the role matrix's; here is what the entries say.
"""

import json
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select, update

from directory_api import audit
from directory_api.models import AuditCount, AuditEntry, Region, User, utcnow
from directory_api.platform.extensions import db

from .conftest import (
    NEW_PASSWORD,
    PG_URL,
    PROBLEM,
    complete_reset,
    invite,
    link_in,
    queued_mail,
    register,
    reset_token,
    signed_in,
    start_reset,
    statements_run,
)
from .factories import (
    PASSWORD,
    make_category,
    make_listing,
    make_region,
    make_social,
    make_vote,
)

VOTE = {
    "yourName": "Vera Voter",
    "yourEmail": "vera.voter@example.org",
    "yourPhone": "+44 700 900 123",
    "businessName": "Harbour Works",
    "businessBranch": "Quay",
    "voteBody": "Fair shifts.",
    "yourPosition": "Clerk",
}
PERSONAL = ("Vera Voter", "vera.voter@example.org", "+44 700 900 123")


@pytest.fixture
def read(clients):
    """Every entry a super sees, newest first (as many as a test makes)."""

    def read(path: str = "/audit/", **params) -> list[dict]:
        response = clients["super"].get(path, query_string={"perPage": 100, **params})
        assert response.status_code == 200, response.get_json()
        return response.get_json()["items"]

    return read


@pytest.fixture
def left_by(read):
    """The entries the request behind a response left, told apart by its X-Request-ID."""

    def left_by(response) -> list[dict]:
        request_id = response.headers["X-Request-ID"]
        return [entry for entry in read() if entry["requestId"] == request_id]

    return left_by


def actor(user) -> dict:
    return {"id": str(user.id), "email": user.email}


# Writes to resources -----------------------------------------------------------------------


def test_creating_changing_and_deleting_a_region_leave_one_entry_each(clients, world, left_by):
    sup = clients["super"]
    created = sup.post("/regions/", json={"name": "North Coast"})
    assert created.status_code == 201
    region_id = created.get_json()["id"]
    [entry] = left_by(created)
    assert entry["action"] == "region.create"
    assert entry["actor"] == actor(world["super"])
    assert entry["target"] == {"type": "region", "id": region_id, "slug": "north-coast"}
    assert entry["location"] is None
    assert entry["changes"] == {"slug": [None, "north-coast"], "name": [None, "North Coast"]}
    assert entry["ip"] == "127.0.0.1"
    assert entry["at"].endswith("Z")

    renamed = sup.put("/regions/slug/north-coast", json={"name": "Northern Coast", "slug": "nc"})
    assert renamed.status_code == 200
    [entry] = left_by(renamed)
    assert entry["action"] == "region.update"
    assert entry["target"] == {"type": "region", "id": region_id, "slug": "nc"}
    assert entry["changes"] == {
        "slug": ["north-coast", "nc"],
        "name": ["North Coast", "Northern Coast"],
    }

    deleted = sup.delete("/regions/slug/nc")
    assert deleted.status_code == 204
    [entry] = left_by(deleted)
    assert (entry["action"], entry["target"]["slug"]) == ("region.delete", "nc")
    assert entry["changes"] == {"slug": ["nc", None], "name": ["Northern Coast", None]}


def test_a_category_entry_names_its_parent_by_slug(clients, world, left_by):
    make_category("food")
    make_category("drink")
    sup = clients["super"]
    created = sup.post("/categories/", json={"name": "Cafes", "parent": "food"})
    assert created.status_code == 201
    [entry] = left_by(created)
    assert entry["changes"]["parent"] == [None, "food"]
    moved = sup.put("/categories/", json={"slug": "cafes", "parent": "drink"})
    assert moved.status_code == 200, moved.get_json()
    [entry] = left_by(moved)
    assert (entry["action"], entry["changes"]) == ("category.update", {"parent": ["food", "drink"]})


def test_an_update_that_changes_nothing_leaves_no_entry(clients, world, left_by):
    make_region("north", "North")
    same = clients["super"].put("/regions/slug/north", json={"name": "North"})
    assert same.status_code == 200
    assert left_by(same) == []


def test_a_listing_entry_names_its_location_and_shows_related_rows_by_slug(clients, world, left_by):
    parent = make_category("food")
    make_category("cafes", parent=parent)
    make_category("bakeries", parent=parent)
    make_social("instagram")
    admin = clients["admin"]
    created = admin.post(
        "/locations/harbour/businesses/",
        json={
            "name": "Quay Café",
            "subcategory": "cafes",
            "socials": [{"social": "instagram", "url": "https://instagram.com/quay"}],
        },
    )
    assert created.status_code == 201, created.get_json()
    [entry] = left_by(created)
    assert entry["action"] == "business.create"
    assert entry["actor"] == actor(world["admin"])
    assert entry["location"] == "harbour"
    assert entry["target"] == {
        "type": "business",
        "id": created.get_json()["id"],
        "slug": "quay-cafe",
    }
    assert entry["changes"] == {
        "slug": [None, "quay-cafe"],
        "name": [None, "Quay Café"],
        "subcategory": [None, "cafes"],
        "socials": [None, [{"social": "instagram", "url": "https://instagram.com/quay"}]],
    }

    changed = admin.put(
        "/locations/harbour/businesses/",
        json={"slug": "quay-cafe", "subcategory": "bakeries", "socials": [], "phone": "+44 1"},
    )
    assert changed.status_code == 200, changed.get_json()
    [entry] = left_by(changed)
    assert entry["action"] == "business.update"
    assert entry["changes"] == {
        "subcategory": ["cafes", "bakeries"],
        "phone": [None, "+44 1"],
        "socials": [[{"social": "instagram", "url": "https://instagram.com/quay"}], None],
    }


def test_an_owner_changing_their_location_is_recorded_there(clients, world, left_by, read):
    changed = clients["owner"].put("/locations/slug/harbour", json={"description": "By the sea."})
    assert changed.status_code == 200, changed.get_json()
    [entry] = left_by(changed)
    assert entry["action"] == "location.update"
    assert entry["location"] == "harbour"
    assert entry["target"]["slug"] == "harbour"
    assert entry["changes"] == {"description": [None, "By the sea."]}


def test_each_row_of_a_csv_import_is_one_entry_and_a_dry_run_none(clients, world, left_by):
    text = "name,phone\nAlpha,+44 1\nBeta,\n"
    headers = {"Content-Type": "text/csv"}
    path = "/locations/harbour/employers/import"
    dry = clients["admin"].post(path + "?dryRun=true", data=text, headers=headers)
    assert dry.status_code == 200
    assert left_by(dry) == []
    imported = clients["admin"].post(path, data=text, headers=headers)
    assert imported.status_code == 200, imported.get_json()
    entries = left_by(imported)
    assert sorted((e["action"], e["target"]["slug"]) for e in entries) == [
        ("employer.create", "alpha"),
        ("employer.create", "beta"),
    ]
    assert all(entry["location"] == "harbour" for entry in entries)


# Votes: moderation is recorded, the voter's personal data never ---------------------------


def test_votes_entered_moderated_and_deleted_by_staff_never_show_personal_data(
    clients, world, left_by, read
):
    admin = clients["admin"]
    created = admin.post("/locations/harbour/votes/", json=VOTE)
    assert created.status_code == 201, created.get_json()
    vote_id = created.get_json()["id"]
    [entry] = left_by(created)
    assert entry["action"] == "vote.create"
    assert entry["target"] == {"type": "vote", "id": vote_id, "slug": None}
    assert entry["location"] == "harbour"
    for field in ("yourName", "yourEmail", "yourPhone"):
        assert entry["changes"][field] == ["[redacted]", "[redacted]"]
    assert entry["changes"]["voteBody"] == [None, "Fair shifts."]

    moderated = admin.put(
        "/locations/harbour/votes/",
        json={"id": vote_id, "active": True, "yourEmail": "other@example.org"},
    )
    assert moderated.status_code == 200, moderated.get_json()
    [entry] = left_by(moderated)
    assert entry["action"] == "vote.update"
    assert entry["changes"] == {
        "active": [False, True],
        "yourEmail": ["[redacted]", "[redacted]"],
    }

    deleted = admin.delete("/locations/harbour/votes/", json={"id": vote_id})
    assert deleted.status_code == 204
    [entry] = left_by(deleted)
    assert entry["action"] == "vote.delete"

    everything = json.dumps(read())
    for personal in (*PERSONAL, "other@example.org"):
        assert personal not in everything
    stored = json.dumps([row.changes for row in db.session.scalars(select(AuditEntry))])
    assert not any(personal in stored for personal in PERSONAL)


def test_a_reply_is_created_changed_and_deleted_with_the_vote_as_its_target(
    clients, world, left_by
):
    vote = make_vote(world["harbour"], active=True, your_email="vera.voter@example.org")
    path = f"/locations/harbour/votes/id/{vote.id}/reply"
    target = {"type": "vote", "id": str(vote.id), "slug": None}
    steps = [
        (clients["admin"].put(path, json={"body": "Thanks!"}), "reply.create", [None, "Thanks!"]),
        (clients["owner"].put(path, json={"body": "Thank you!"}), "reply.update", None),
        (clients["owner"].delete(path), "reply.delete", ["Thank you!", None]),
    ]
    expected_actors = [world["admin"], world["owner"], world["owner"]]
    for (response, action, change), who in zip(steps, expected_actors, strict=True):
        assert response.status_code < 300, response.get_json()
        [entry] = left_by(response)
        assert entry["action"] == action
        assert entry["target"] == target
        assert entry["location"] == "harbour"
        assert entry["actor"] == actor(who)
        assert entry["changes"] == {"replyBody": change or ["Thanks!", "Thank you!"]}
    # The same text again changes nothing, and records nothing.
    clients["owner"].put(path, json={"body": "Again."})
    assert left_by(clients["owner"].put(path, json={"body": "Again."})) == []


def test_the_publics_votes_and_receipts_are_not_privileged_writes(app, clients, world, read):
    make_listing("employer", world["harbour"], "harbour-works", name="Harbour Works")
    before = len(read())
    public = app.test_client()
    submitted = public.post("/locations/harbour/votes/submit/employer", json=VOTE)
    assert submitted.status_code == 201, submitted.get_json()
    [receipt] = queued_mail(template="vote_receipt")
    confirmed = public.post(f"/votes/confirm/{link_in(receipt.body, '/votes/confirm/')}")
    assert confirmed.status_code == 200
    assert len(read()) == before


# Roles -------------------------------------------------------------------------------------


@pytest.mark.parametrize("named", [{"employer": "harbour-works"}, {}], ids=["by-slug", "by-name"])
def test_a_signed_in_submitter_s_vote_entry_names_its_employer(clients, world, left_by, named):
    """The submission gives the new vote its employer's id, not the object (issue 36): the
    entry names the employer by slug all the same (found by helper-22's review)."""
    make_listing("employer", world["harbour"], "harbour-works", name="Harbour Works")
    response = clients["owner"].post(
        "/locations/harbour/votes/submit/employer", json={**VOTE, **named}
    )
    assert response.status_code == 201, response.get_json()
    [entry] = left_by(response)
    assert entry["action"] == "vote.create"
    assert entry["changes"]["employer"] == [None, "harbour-works"]


def test_inviting_a_new_address_is_one_grant_of_the_new_account(clients, world, left_by):
    invited = clients["super"].post(
        "/locations/harbour/owners/", json={"email": "new.owner@example.com", "name": "Nora"}
    )
    assert invited.status_code == 201, invited.get_json()
    [entry] = left_by(invited)
    assert entry["action"] == "owner.grant"
    assert entry["target"] == {"type": "user", "id": invited.get_json()["id"], "slug": None}
    assert entry["location"] == "harbour"
    assert entry["changes"] == {"role": [None, "owner"]}  # the account: by its id


def test_an_offer_is_granted_then_accepted_by_its_user(app, clients, world, left_by):
    offered = clients["owner"].post(
        "/locations/harbour/admins/", json={"email": world["plain"].email}
    )
    assert offered.status_code == 201, offered.get_json()
    [entry] = left_by(offered)
    assert (entry["action"], entry["actor"]) == ("admin.grant", actor(world["owner"]))
    assert entry["target"]["id"] == str(world["plain"].id)
    assert entry["changes"] == {"pending": [None, "admin"]}

    token = link_in(queued_mail(world["plain"].email)[-1].body, "/roles/accept/")
    accepted = clients["plain"].post(f"/me/roles/accept/{token}")
    assert accepted.status_code == 200, accepted.get_json()
    [entry] = left_by(accepted)
    assert (entry["action"], entry["actor"]) == ("admin.accept", actor(world["plain"]))
    assert entry["location"] == "harbour"
    assert entry["changes"] == {"role": [None, "admin"]}


@pytest.mark.parametrize(
    ("maker", "withdrawer", "base", "role", "location"),
    [
        ("owner", "super", "/locations/harbour/admins", "admin", "harbour"),
        ("super", "super", "/locations/harbour/owners", "owner", "harbour"),
        ("super", "super", "/supers", "super", None),
    ],
)
def test_withdrawing_an_offer_is_recorded_by_who_withdrew_it(
    clients, world, left_by, maker, withdrawer, base, role, location
):
    plain = world["plain"]
    assert clients[maker].post(f"{base}/", json={"email": plain.email}).status_code == 201
    withdrawn = clients[withdrawer].delete(f"{base}/pending/id/{plain.id}")
    assert withdrawn.status_code == 204
    [entry] = left_by(withdrawn)
    assert (entry["action"], entry["actor"]) == (f"{role}.withdraw", actor(world[withdrawer]))
    assert entry["target"] == {"type": "user", "id": str(plain.id), "slug": None}
    assert entry["location"] == location
    assert entry["changes"] == {"pending": [role, None]}
    assert left_by(clients[withdrawer].delete(f"{base}/pending/id/{plain.id}")) == []


def test_removing_roles_and_super_rights(clients, world, left_by):
    removed = clients["owner"].delete(f"/locations/harbour/admins/id/{world['admin'].id}")
    assert removed.status_code == 204
    [entry] = left_by(removed)
    assert entry["action"] == "admin.remove"
    assert entry["location"] == "harbour"
    assert entry["changes"] == {"role": ["admin", None]}

    invited = clients["super"].post("/supers/", json={"email": "second.super@example.com"})
    assert invited.status_code == 201
    [entry] = left_by(invited)
    assert (entry["action"], entry["changes"]["role"]) == ("super.grant", [None, "super"])
    revoked = clients["super"].delete(f"/supers/id/{invited.get_json()['id']}")
    assert revoked.status_code == 204
    [entry] = left_by(revoked)
    assert (entry["action"], entry["changes"]) == ("super.remove", {"role": ["super", None]})


# Accounts ----------------------------------------------------------------------------------


def test_account_changes_are_named_and_passwords_never_shown(app, clients, world, left_by, read):
    owner = clients["owner"]
    renamed = owner.put(f"/me/id/{world['owner'].id}", json={"name": "Olga"})
    [entry] = left_by(renamed)
    assert (entry["action"], entry["changes"]) == ("user.update", {"name": [None, "Olga"]})

    edited = owner.put(f"/locations/harbour/admins/id/{world['admin'].id}", json={"phone": "+1 2"})
    assert edited.status_code == 200
    [entry] = left_by(edited)
    assert (entry["action"], entry["actor"]) == ("user.update", actor(world["owner"]))
    assert entry["target"]["id"] == str(world["admin"].id)
    # A user's details are the supers' to see: no location's log shows them.
    assert entry["location"] is None
    assert owner.get("/locations/harbour/audit/?action=user.update").get_json()["total"] == 0

    changed = owner.post(
        "/me/password-update",
        json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD},
    )
    assert changed.status_code == 204
    [entry] = left_by(changed)
    assert entry["action"] == "user.password_change"
    assert entry["changes"] == {"password": ["[redacted]", "[redacted]"]}
    assert "argon2" not in json.dumps(read())


def test_self_service_through_mailed_links_is_recorded_with_the_account_as_actor(
    app, clients, world, left_by
):
    public = app.test_client()
    start_reset(public, world["owner"].email)
    # Completed in a browser where someone else is signed in: still the account's change.
    reset = complete_reset(clients["plain"], reset_token(world["owner"].email))
    assert reset.status_code == 204
    [entry] = left_by(reset)
    assert entry["action"] == "user.password_change"
    assert entry["actor"] == actor(world["owner"])

    user_id, token = invite(clients["super"], "newbie@example.com")
    # Registering sets a password and signs in: two entries, both the account's.
    registered = register(clients["plain"], user_id, token, name="Newbie")  # plain looks on
    assert registered.status_code == 200
    entries = {entry["action"]: entry for entry in left_by(registered)}
    assert set(entries) == {"user.password_change", "auth.login"}
    assert {entry["actor"]["id"] for entry in entries.values()} == {user_id}
    assert entries["user.password_change"]["changes"] == {
        "password": ["[redacted]", "[redacted]"],
        "name": [None, "Newbie"],
    }

    admin = clients["admin"]
    asked = admin.post("/me/email-update", json={"email": "adm@new.example", "password": PASSWORD})
    assert asked.status_code == 202
    token = link_in(queued_mail("adm@new.example")[-1].body, "/email-update/")
    confirmed = app.test_client().post(f"/me/email-update/{token}")
    assert confirmed.status_code == 200
    [entry] = left_by(confirmed)
    assert entry["action"] == "user.email_change"
    assert entry["changes"] == {"email": ["admin@example.com", "adm@new.example"]}


# Sign-in events ----------------------------------------------------------------------------


def test_sign_in_failed_sign_in_and_sign_out(app, clients, world, left_by):
    client = app.test_client()
    owner = world["owner"]
    failed = client.post("/auth/login", json={"email": owner.email, "password": "wrong one!"})
    assert failed.status_code == 401
    [entry] = left_by(failed)
    assert entry["action"] == "auth.login_failed"
    assert entry["actor"] is None
    assert entry["target"] == {"type": "user", "id": str(owner.id), "slug": None}

    unknown = client.post("/auth/login", json={"email": "nobody@example.com", "password": "x"})
    [entry] = left_by(unknown)
    assert (entry["action"], entry["actor"]) == ("auth.login_failed", None)
    assert entry["target"] == {"type": "user", "id": None, "slug": None}

    signed = client.post("/auth/login", json={"email": owner.email, "password": PASSWORD})
    assert signed.status_code == 200
    [entry] = left_by(signed)
    assert (entry["action"], entry["actor"]) == ("auth.login", actor(owner))
    assert entry["changes"] == {}

    out = client.post("/auth/logout")
    assert out.status_code == 204
    [entry] = left_by(out)
    assert (entry["action"], entry["actor"]) == ("auth.logout", actor(owner))


def test_a_sign_in_that_rehashes_the_password_is_only_a_sign_in(app_factory, world):
    before = world["owner"].password_hash
    stronger = app_factory(ARGON2_TIME_COST=2)  # the stored hash is now too cheap
    with stronger.app_context():
        signed_in(stronger, "owner@example.com")
        owner = db.session.scalar(select(User).where(User.email == "owner@example.com"))
        assert owner.password_hash != before  # rehashed
        actions = db.session.scalars(select(AuditEntry.action)).all()
    assert actions == ["auth.login"]


# One transaction ---------------------------------------------------------------------------


def test_a_refused_write_leaves_no_entry(clients, world, read):
    make_region("north")
    before = read()
    taken = clients["super"].post("/regions/", json={"name": "North", "slug": "north"})
    assert taken.status_code == 409
    invalid = clients["super"].post("/regions/", json={"name": ""})
    assert invalid.status_code == 422
    assert read() == before


def test_an_entry_that_cannot_be_written_takes_its_change_along(clients, world, monkeypatch):
    written = audit.entry_row

    def unwritable(*args):
        return {**written(*args), "action": None}  # NOT NULL: the insert fails

    assert clients["super"]  # signed in before the log breaks
    monkeypatch.setattr(audit, "entry_row", unwritable)
    failed = clients["super"].post("/regions/", json={"name": "South"})
    assert failed.status_code == 409  # the database refused the entry
    assert failed.headers["Content-Type"] == PROBLEM
    db.session.rollback()
    assert db.session.scalar(select(Region).where(Region.slug == "south")) is None


# Reading -----------------------------------------------------------------------------------


def test_owners_see_their_locations_entries_only(clients, world, read):
    assert clients["admin"].post("/locations/harbour/businesses/", json={"name": "A"}).status_code
    assert clients["other_admin"].post("/locations/hill/businesses/", json={"name": "B"})
    harbour = clients["owner"].get("/locations/harbour/audit/").get_json()
    assert [(e["action"], e["location"]) for e in harbour["items"]] == [
        ("business.create", "harbour")
    ]
    assert harbour["total"] == 1
    hill = read("/locations/hill/audit/")
    assert [e["target"]["slug"] for e in hill] == ["b"]
    # The location filter is the path's at one location.
    refused = clients["owner"].get("/locations/harbour/audit/?location=hill")
    assert refused.status_code == 422


def test_filters_and_order(clients, world, read):
    sup = clients["super"]
    for name in ("One", "Two", "Three"):
        assert sup.post("/regions/", json={"name": name}).status_code == 201
    created = read(action="region.create")
    assert [e["target"]["slug"] for e in created] == ["three", "two", "one"]  # newest first
    assert [e["target"]["slug"] for e in read(action="region.create", sort="at")] == [
        "one",
        "two",
        "three",
    ]
    by_super = read(actor=str(world["super"].id))
    assert {e["action"] for e in by_super} == {"auth.login", "region.create"}
    assert read(actor=str(world["owner"].id)) == []
    assert read(location="nowhere") == []

    second = created[1]["at"]
    assert [e["target"]["slug"] for e in read(action="region.create", since=second)] == [
        "three",
        "two",
    ]
    assert [e["target"]["slug"] for e in read(action="region.create", until=second)] == [
        "two",
        "one",
    ]
    today = utcnow().date().isoformat()
    assert len(read(action="region.create", until=today)) == 3  # a date: the whole day
    assert read(action="region.create", since=(utcnow() + timedelta(days=1)).isoformat()) == []


@pytest.mark.parametrize(
    "query",
    [
        "since=yesterday",
        "until=2026-02-30",
        "since=0999-01-01",
        "since=2026-11-23T10:00:00%2B24:00",
        "until=2026-11-23T25:00",
        "actor=not-a-uuid",
        "location=Not%20A%20Slug",
        "sort=actor",
        "action=",
    ],
)
def test_bad_filters_are_422(clients, world, query):
    response = clients["super"].get(f"/audit/?{query}")
    assert response.status_code == 422, response.get_json()
    assert response.headers["Content-Type"] == PROBLEM


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["/audit/", "/locations/harbour/audit/"])
def test_entries_cannot_be_changed_through_the_api(clients, world, read, method, path):
    before = read()
    response = clients["super"].open(path, method=method, json={})
    assert response.status_code == 405
    assert read() == before


def test_retention_deletes_entries_older_than_the_setting(app, clients, world, read):
    clients["super"].post("/regions/", json={"name": "Kept"})
    db.session.add(
        AuditEntry(action="region.create", target_type="region", at=utcnow() - timedelta(days=401))
    )
    db.session.commit()
    result = app.test_cli_runner().invoke(args=["retention", "run"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["auditEntriesDeleted"] == 1
    assert {e["action"] for e in read()} == {"auth.login", "region.create"}


def test_deleting_a_location_records_the_end_of_each_role_there(clients, world, left_by):
    expected = [
        ("location.delete", str(world["hill"].id)),
        ("owner.remove", str(world["other_owner"].id)),
        ("admin.remove", str(world["other_admin"].id)),
    ]
    deleted = clients["super"].delete("/locations/slug/hill")
    assert deleted.status_code == 204
    entries = left_by(deleted)
    assert sorted((e["action"], e["target"]["id"]) for e in entries) == sorted(expected)
    assert all(entry["location"] == "hill" for entry in entries)


def test_accepting_an_offer_is_recorded_even_when_it_changes_nothing(clients, world, left_by):
    plain = world["plain"]
    for inviter, role in (("owner", "admins"), ("super", "owners")):
        offered = clients[inviter].post(f"/locations/harbour/{role}/", json={"email": plain.email})
        assert offered.status_code == 201
    admin_offer, owner_offer = [
        link_in(mail.body, "/roles/accept/") for mail in queued_mail(plain.email)[-2:]
    ]
    accepted = clients["plain"].post(f"/me/roles/accept/{owner_offer}")
    [entry] = left_by(accepted)
    assert (entry["action"], entry["changes"]) == ("owner.accept", {"role": [None, "owner"]})
    # Now an owner, which includes being an admin: the admin offer changes nothing.
    moot = clients["plain"].post(f"/me/roles/accept/{admin_offer}")
    assert moot.status_code == 200
    [entry] = left_by(moot)
    assert (entry["action"], entry["changes"]) == ("admin.accept", {})
    assert entry["actor"] == actor(plain)


def test_a_category_rename_reads_no_listing_it_does_not_record(app, clients, world):
    """The audit reads only what changed: a rename that refreshes the search text of every
    listing of the subcategory costs the same statements for 5 listings as for 40."""

    parent = make_category("food")
    cafes = make_category("cafes", parent=parent)
    sup = clients["super"]  # signed in before counting

    def statements_for_rename(count: int, name: str) -> int:
        for number in range(count):
            make_listing("business", world["harbour"], f"{name}-{number}", subcategory=cafes)
        with statements_run() as executed:
            response = sup.put("/categories/", json={"slug": "cafes", "name": name})
        assert response.status_code == 200
        return len(executed)

    assert statements_for_rename(5, "five") == statements_for_rename(40, "forty")


def test_an_ipv6_zone_is_not_kept(app, world, left_by):
    client = app.test_client()
    zoned = {"REMOTE_ADDR": "fe80::1%" + "x" * 60}
    failed = client.post(
        "/auth/login", json={"email": "owner@example.com", "password": "wrong!"}, environ_base=zoned
    )
    assert failed.status_code == 401
    [entry] = left_by(failed)
    assert entry["ip"] == "fe80::1"


# --- what each model audits is declared on it, and covers every column -----------------------


def undeclared_columns(model: type, rule) -> list[str]:
    """Columns of `model` that `rule` neither audits (directly, or through the relationship
    they hold) nor leaves out on purpose; and names it lists that the model lacks."""
    from sqlalchemy import inspect

    mapper = inspect(model)
    covered = set(rule.fields) | set(rule.unaudited)
    for name in rule.fields:
        if name in mapper.relationships:
            covered |= {column.key for column in mapper.relationships[name].local_columns}
    columns = {attribute.key for attribute in mapper.column_attrs}
    missing = sorted(columns - covered)
    unknown = sorted(
        f"{name} (not on {model.__name__})"
        for name in (*rule.fields, *rule.unaudited)
        if name not in columns and name not in mapper.relationships
    )
    return missing + unknown


def test_every_column_of_an_audited_model_is_audited_or_left_out_on_purpose():
    from directory_api.audit import AUDITED, RECORDED_TYPES
    from directory_api.schemas.audit import AuditTarget

    documented = AuditTarget._declared_fields["type"].metadata["enum"]
    # What the document says: every type an entry can name.
    assert {rule.type for rule in AUDITED.values()} | RECORDED_TYPES == set(documented)
    problems = {
        model.__name__: found
        for model, rule in AUDITED.items()
        if (found := undeclared_columns(model, rule))
    }
    assert problems == {}, "declare each in the model's __audit__: fields or unaudited"


def test_a_new_column_nobody_declared_is_caught():
    """The check above can fail: a column missing from both lists is named."""
    from dataclasses import replace

    from directory_api.audit import AUDITED
    from directory_api.models import Vote

    rule = AUDITED[Vote]
    forgotten = replace(rule, unaudited=tuple(c for c in rule.unaudited if c != "email_hash"))
    assert undeclared_columns(Vote, forgotten) == ["email_hash"]
    misspelt = replace(rule, fields=(*rule.fields, "your_adress"))
    assert undeclared_columns(Vote, misspelt) == ["your_adress (not on Vote)"]


# Totals at any size: kept by the database ----------------------------------------------


def _counted_by_query(location_id=None) -> int:
    stmt = select(func.count()).select_from(AuditEntry)
    if location_id is not None:
        stmt = stmt.where(AuditEntry.location_id == location_id)
    return db.session.scalar(stmt)


def test_totals_match_the_entries_through_writes_retention_sql_and_folding(
    app, clients, world, read
):
    """The totals come from `audit_counts`, which the database's triggers keep: every way
    entries come and go (a request, retention's bulk delete, a statement of an operator's,
    a rolled-back write, a move to another location) leaves them equal to a count."""
    sup, owner = clients["super"], clients["owner"]
    harbour, hill = world["harbour"], world["hill"]

    def totals() -> tuple[int, int, int, int]:
        every = sup.get("/audit/").get_json()["total"]
        here = owner.get("/locations/harbour/audit/").get_json()["total"]
        there = sup.get("/audit/", query_string={"location": "hill"}).get_json()["total"]
        return every, here, there, _counted_by_query()

    def agree() -> None:
        every, here, there, counted = totals()
        assert (every, here, there) == (
            counted,
            _counted_by_query(harbour.id),
            _counted_by_query(hill.id),
        )

    for name in ("A", "B", "C"):
        assert clients["admin"].post("/locations/harbour/businesses/", json={"name": name})
    assert clients["other_admin"].post("/locations/hill/businesses/", json={"name": "D"})
    agree()
    assert totals()[1] == 3

    # Rows of the past, written and deleted with SQL past the ORM, in one statement each.
    old = utcnow() - timedelta(days=401)
    db.session.execute(
        insert(AuditEntry),
        [
            {"action": "region.create", "target_type": "region", "at": old, "changes": {}},
            *(
                {
                    "action": "business.update",
                    "target_type": "business",
                    "location_id": harbour.id,
                    "at": old,
                    "changes": {},
                }
                for _ in range(5)
            ),
        ],
    )
    db.session.commit()
    agree()
    assert totals()[1] == 8

    # A write that rolls back takes its count along.
    db.session.add(AuditEntry(action="region.create", target_type="region", changes={}))
    db.session.flush()
    db.session.rollback()
    agree()

    # Moved to another location (nothing in the API does; an operator might).
    db.session.execute(
        update(AuditEntry)
        .where(AuditEntry.location_id == harbour.id, AuditEntry.at == old)
        .values(location_id=hill.id)
    )
    db.session.commit()
    agree()
    assert totals()[1:3] == (3, 6)

    result = app.test_cli_runner().invoke(args=["retention", "run"])
    assert json.loads(result.output)["auditEntriesDeleted"] == 6
    agree()
    rows = db.session.scalar(select(func.count()).select_from(AuditCount))
    assert rows > 3  # one row per statement at least

    # Folded into a row per location, with nothing lost.
    before = totals()
    assert audit.compact_counts() == rows
    assert totals() == before
    kept = db.session.execute(select(AuditCount.location_id, AuditCount.entries)).all()
    assert len(kept) == len({location_id for location_id, _ in kept}) == 3
    assert sum(entries for _, entries in kept) == before[0]

    # A filter the kept counts cannot answer is counted by a query.
    assert read(action="business.create") and (
        sup.get("/audit/?action=business.create").get_json()["total"] == 4
    )
    assert sup.get("/audit/?location=nowhere").get_json()["total"] == 0


def test_the_worker_folds_the_counts_hourly():
    from directory_api.cli import HOUSEKEEPING, compact_audit_counts

    assert (3600.0, compact_audit_counts) in HOUSEKEEPING


def test_a_total_is_one_small_read_not_a_count_of_the_entries(app, clients, world):
    """At a million entries a COUNT(*) took 200 ms on this machine's PostgreSQL (bench/
    SCALE.md): the unfiltered lists read the kept counts instead."""
    sup = clients["super"]
    sup.get("/audit/")
    with statements_run() as statements:
        assert sup.get("/audit/").status_code == 200
        assert clients["owner"].get("/locations/harbour/audit/").status_code == 200
    texts = [executed.sql.lower() for executed in statements]
    assert [text for text in texts if "count(" in text] == []
    assert sum("audit_counts" in text for text in texts) == 2


@pytest.mark.skipif(
    not PG_URL, reason="statement-level triggers are PostgreSQL's (CI's PostgreSQL pass)"
)
def test_many_entries_of_one_write_are_counted_in_one_row(clients, world):
    """A write of many entries (an import of 40 listings) inserts them in one statement, so
    PostgreSQL's statement-level trigger keeps one count row for them, not one each (a
    review found 300 rows for 300 entries when they went one INSERT each)."""
    sup = clients["super"]  # signed in (an entry of its own) before counting
    before = db.session.scalar(select(func.count()).select_from(AuditCount))
    text = "name\n" + "".join(f"Imported {number}\n" for number in range(40))
    response = sup.post(
        "/locations/harbour/businesses/import", data=text.encode(), content_type="text/csv"
    )
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["created"] == 40
    db.session.rollback()
    added = db.session.scalar(select(func.count()).select_from(AuditCount)) - before
    assert added == 1
    assert sup.get("/audit/?location=harbour").get_json()["total"] >= 40
