"""Webhook events (API.md 16): written in the change's own transaction, for the
subscriptions that want them, with thin payloads that hold no personal data; none for a
rolled-back change, and no statement at all for a change nobody listens to."""

import json

import pytest
from sqlalchemy import event, select

from directory_api.models import Business, Location, Role, Vote, WebhookDelivery
from directory_api.models.webhook import GLOBAL_EVENTS, LOCATION_EVENTS
from directory_api.platform.extensions import db
from directory_api.webhooks.events import PAYLOAD_LIMIT

from .conftest import link_in, queued_mail, signed_in, statements_run
from .factories import grant, make_listing, make_location, make_user

HOOKS = "/locations/harbour/webhooks/"
RECEIVER = "http://127.0.0.1:9/hooks"  # never called here: deliveries are only written
VOTER = {
    "yourName": "Val Voter",
    "yourEmail": "val.voter@example.org",
    "yourPhone": "+44 20 7946 0018",
    "businessName": "Harbour Works",
    "businessBranch": "Quay",
    "voteBody": "Fair pay, kind people, a secret only staff should read.",
    "yourPosition": "Clerk",
}
PERSONAL = ("Val Voter", "val.voter@example.org", "7946", "secret only staff", "Clerk")


@pytest.fixture
def staff(app_factory):
    """An app whose receivers may be on loopback; harbour's owner and a super signed in."""
    app = app_factory(
        WEBHOOK_ALLOW_HTTP=True,
        WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"],
        RATELIMIT_VOTES_PER_IP="1000/hour",
    )
    with app.app_context():
        harbour = make_location("harbour", email="desk@harbour.example")
        grant(make_user("owner@example.com"), harbour, Role.OWNER)
        make_user("root@example.com", is_super=True)
        yield {
            "app": app,
            "owner": signed_in(app, "owner@example.com"),
            "super": signed_in(app, "root@example.com"),
            "anonymous": app.test_client(),
        }


def subscribe(client, events, path=HOOKS) -> dict:
    response = client.post(path, json={"url": RECEIVER, "events": list(events)})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def written() -> list[tuple[str, dict]]:
    """Each delivery written so far: its event, and its body as sent."""
    db.session.rollback()
    rows = db.session.scalars(
        select(WebhookDelivery).order_by(WebhookDelivery.created_at, WebhookDelivery.type)
    )
    return [(row.type, json.loads(row.payload)) for row in rows]


def ok(response, status: int = 200):
    assert response.status_code == status, response.get_json()
    return response.get_json()


def vote(staff, **changes) -> str:
    body = {**VOTER, **changes}
    return ok(staff["anonymous"].post("/locations/harbour/votes/submit/employer", json=body), 201)[
        "id"
    ]


# --- which events, from which changes ------------------------------------------------------


def test_a_votes_life_is_told_without_personal_data(staff):
    subscribe(staff["owner"], LOCATION_EVENTS)
    owner = staff["owner"]
    first = vote(staff)
    token = link_in(queued_mail("val.voter@example.org")[-1].body, "/votes/confirm/")
    ok(staff["anonymous"].post(f"/votes/confirm/{token}"))
    ok(owner.put("/locations/harbour/votes/", json={"id": first, "active": True}))
    reply = f"/locations/harbour/votes/id/{first}/reply"
    ok(owner.put(reply, json={"body": "Thank you!"}), 201)
    ok(owner.put(reply, json={"body": "Thank you, Val's friends!"}))
    ok(owner.delete(reply), 204)
    ok(owner.delete("/locations/harbour/votes/", json={"id": first}), 204)
    second = vote(staff, yourEmail="other.voter@example.org")
    other_token = link_in(queued_mail("other.voter@example.org")[-1].body, "/votes/withdraw/")
    ok(staff["anonymous"].post(f"/votes/withdraw/{other_token}"), 204)
    events = written()
    assert [kind for kind, _ in events] == [
        "vote.submitted",
        "vote.confirmed",
        "vote.updated",
        "reply.created",
        "reply.updated",
        "reply.deleted",
        "vote.deleted",
        "vote.submitted",
        "vote.withdrawn",
    ]
    submitted = events[0][1]
    assert set(submitted) == {"type", "timestamp", "location", "data"}
    assert submitted["location"] == "harbour"
    assert set(submitted["data"]) == {
        "id",
        "type",
        "active",
        "employer",
        "confirmed",
        "createdAt",
        "updatedAt",
    }
    assert submitted["data"]["id"] == first
    assert events[1][1]["data"]["confirmed"] is True
    assert events[2][1]["data"]["active"] is True
    assert events[3][1]["data"]["body"] == "Thank you!" and events[3][1]["data"]["vote"] == first
    assert events[6][1]["data"] == {"id": first}
    assert events[8][1]["data"] == {"id": second}
    for _, payload in events:  # the reply is public; nothing the voter gave is anywhere
        text = json.dumps(payload)
        assert not [value for value in PERSONAL if value in text], text


def test_a_vote_naming_its_employer_by_slug_is_told_without_reading_it_again(staff):
    """The submission reads the employer's id, slug and name as columns with the voter's
    history (issue 36); its event names the employer by that slug, and no statement reads
    the employer's row again for it."""
    subscribe(staff["owner"], ["vote.submitted"])
    harbour = db.session.scalars(select(Location).filter_by(slug="harbour")).one()
    make_listing("employer", harbour, "works", name="Harbour Works")
    with statements_run() as run:
        vote(staff, employer="works")
    reads = [s.sql for s in run if s.sql.startswith("SELECT") and "FROM listings" in s.sql]
    assert len(reads) == 1, reads  # the submission's, by slug
    [(kind, payload)] = written()
    assert kind == "vote.submitted"
    assert payload["data"]["employer"] == "works"


def test_listings_and_the_location_are_told_with_their_public_representation(staff):
    subscribe(staff["owner"], LOCATION_EVENTS)
    owner = staff["owner"]
    place = {"slug": "bakery", "name": "Bakery", "email": "bread@example.org"}
    made = ok(owner.post("/locations/harbour/businesses/", json=place), 201)
    ok(owner.put("/locations/harbour/businesses/", json={"slug": "bakery", "name": "Bakes"}))
    ok(owner.put("/locations/harbour/businesses/", json={"slug": "bakery", "name": "Bakes"}))
    ok(owner.delete("/locations/harbour/businesses/", json={"slug": "bakery"}), 204)
    ok(owner.post("/locations/harbour/employers/", json={"slug": "works", "name": "Works"}), 201)
    ok(owner.put("/locations/slug/harbour", json={"name": "Harbour Town"}))
    events = written()
    assert [kind for kind, _ in events] == [
        "business.created",
        "business.updated",  # once: the second PUT changed nothing
        "business.deleted",
        "employer.created",
        "location.updated",
    ]
    created = events[0][1]["data"]
    assert created == {**made, "updatedAt": made["updatedAt"]}  # what GET shows
    assert events[2][1]["data"] == {"id": made["id"], "slug": "bakery"}
    assert events[4][1]["data"]["name"] == "Harbour Town"
    assert events[4][1]["location"] == "harbour"


def test_a_subscription_gets_only_the_events_it_lists(staff):
    subscribe(staff["owner"], ["business.deleted"])
    owner = staff["owner"]
    ok(owner.post("/locations/harbour/businesses/", json={"slug": "b", "name": "B"}), 201)
    vote(staff)
    assert written() == []
    ok(owner.delete("/locations/harbour/businesses/", json={"slug": "b"}), 204)
    assert [kind for kind, _ in written()] == ["business.deleted"]


def test_global_subscriptions_hear_the_reference_lists_and_locations(staff):
    root = staff["super"]
    subscribe(root, GLOBAL_EVENTS, path="/webhooks/")
    ok(root.post("/regions/", json={"slug": "north", "name": "North"}), 201)
    ok(root.put("/regions/slug/north", json={"name": "Far North"}))
    ok(root.post("/locations/", json={"slug": "hill", "name": "Hill", "region": "north"}), 201)
    ok(root.delete("/locations/slug/hill"), 204)
    ok(root.delete("/regions/slug/north"), 204)
    events = written()
    assert [kind for kind, _ in events] == [
        "region.created",
        "region.updated",
        "location.created",
        "location.deleted",
        "region.deleted",
    ]
    assert events[0][1]["location"] is None
    assert events[0][1]["data"]["slug"] == "north"
    assert events[3][1]["location"] == "hill"
    assert events[3][1]["data"]["slug"] == "hill"


def test_each_subscription_that_wants_an_event_gets_its_own_delivery(staff):
    subscribe(staff["owner"], ["vote.submitted"])
    subscribe(staff["owner"], ["vote.submitted", "vote.deleted"])
    subscribe(staff["super"], ["vote.submitted"], path="/webhooks/")
    disabled = subscribe(staff["owner"], ["vote.submitted"])
    ok(staff["owner"].put(HOOKS + f"id/{disabled['id']}", json={"enabled": False}))
    vote(staff)
    db.session.rollback()
    rows = db.session.scalars(select(WebhookDelivery)).all()
    assert len(rows) == 3
    assert len({row.event_id for row in rows}) == 1  # one event: one webhook-id
    assert len({row.payload for row in rows}) == 1
    assert disabled["id"] not in {str(row.subscription_id) for row in rows}


# --- in the change's transaction ---------------------------------------------------------------


def test_a_rolled_back_change_writes_no_delivery(staff):
    subscribe(staff["owner"], LOCATION_EVENTS)
    harbour = db.session.scalar(select(Location).where(Location.slug == "harbour"))
    db.session.add(Business(location_id=harbour.id, slug="gone", name="Gone"))
    db.session.flush()
    db.session.rollback()
    assert written() == []
    db.session.add(Business(location_id=harbour.id, slug="kept", name="Kept"))
    db.session.commit()
    assert [kind for kind, _ in written()] == ["business.created"]


def test_a_refused_request_writes_no_delivery(staff):
    subscribe(staff["owner"], LOCATION_EVENTS)
    taken = {"slug": "b", "name": "B"}
    ok(staff["owner"].post("/locations/harbour/businesses/", json=taken), 201)
    again = staff["owner"].post("/locations/harbour/businesses/", json=taken)
    assert again.status_code == 409
    assert [kind for kind, _ in written()] == ["business.created"]


# --- what it costs ------------------------------------------------------------------------------


class Statements:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.seen: list[str] = []

    def __enter__(self):
        event.listen(self.engine, "before_cursor_execute", self.count)
        return self

    def __exit__(self, *exc) -> None:
        event.remove(self.engine, "before_cursor_execute", self.count)

    def count(self, conn, cursor, statement, *args) -> None:
        self.seen.append(statement)

    def writing_deliveries(self) -> int:
        return sum("INSERT INTO webhook_deliveries" in s for s in self.seen)


def test_a_change_nobody_listens_to_costs_no_statement(staff):
    hill = make_location("hill")
    grant(make_user("hill-owner@example.com"), hill, Role.OWNER)
    subscribe(
        signed_in(staff["app"], "hill-owner@example.com"),
        ["vote.submitted"],
        "/locations/hill/webhooks/",
    )
    with Statements(db.engine) as quiet:
        vote(staff)  # at harbour: only hill listens
    subscribe(staff["owner"], ["vote.deleted"])  # listens, but not to this event
    with Statements(db.engine) as heard:
        vote(staff, yourEmail="second@example.org")
    assert quiet.writing_deliveries() == 0
    assert heard.writing_deliveries() == 1  # one statement, whatever it finds
    assert len(heard.seen) == len(quiet.seen) + 1
    assert written() == []


def test_a_payload_past_the_limit_is_its_id_and_slug(staff, monkeypatch):
    from directory_api.webhooks import events as webhook_events

    monkeypatch.setattr(webhook_events, "PAYLOAD_LIMIT", 200)
    subscribe(staff["owner"], ["business.created"])
    made = ok(
        staff["owner"].post(
            "/locations/harbour/businesses/",
            json={"slug": "long", "name": "Long", "description": "x" * 300},
        ),
        201,
    )
    [(_, payload)] = written()
    assert payload["data"] == {"id": made["id"], "slug": "long"}
    assert PAYLOAD_LIMIT == 20 * 1024


def test_a_votes_stored_row_is_its_own(staff):
    """The event names the vote the submitter made (not another one of theirs)."""
    subscribe(staff["owner"], ["vote.submitted"])
    ids = [vote(staff, yourEmail=f"v{n}@example.org") for n in range(3)]
    assert [payload["data"]["id"] for _, payload in written()] == ids
    assert db.session.scalar(select(db.func.count()).select_from(Vote)) == 3
