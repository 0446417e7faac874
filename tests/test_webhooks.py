"""Webhook subscriptions (API.md 16): a location's (its owners, supers) and global ones
(supers), their signing secrets, and the guard on where the service may connect.

Who may call each route is the role matrix's; deliveries come with the outbox worker.
"""

import base64
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Text, func, select, type_coerce

from directory_api.models import AuditEntry, WebhookSubscription, utcnow
from directory_api.models.webhook import PER_LOCATION
from directory_api.platform.extensions import db
from directory_api.platform.ssrf import Refused, checked_addresses, parse_networks

from .conftest import PG_URL, assert_problem, database_rows

HOOKS = "/locations/harbour/webhooks/"
RECEIVER = "https://93.184.216.34/hooks/directory"  # a public address, no DNS needed


def create(client, path: str = HOOKS, status: int = 201, **changes) -> dict:
    body = {"url": RECEIVER, "events": ["vote.submitted", "business.updated"], **changes}
    response = client.post(path, json=body)
    assert response.status_code == status, response.get_json()
    return response.get_json()


def test_an_owner_subscribes_and_sees_the_secret_once(clients, world):
    owner = clients["owner"]
    response = owner.post(
        HOOKS,
        json={"url": RECEIVER, "events": ["vote.submitted"], "description": "CRM"},
    )
    assert response.status_code == 201, response.get_json()
    made = response.get_json()
    assert response.headers["Location"].endswith(f"/locations/harbour/webhooks/id/{made['id']}")
    assert made["secret"].startswith("whsec_")
    assert len(base64.b64decode(made["secret"].removeprefix("whsec_"))) == 32
    assert (made["url"], made["events"], made["location"]) == (
        RECEIVER,
        ["vote.submitted"],
        "harbour",
    )
    assert (made["enabled"], made["disabledReason"], made["description"]) == (True, None, "CRM")
    shown = owner.get(HOOKS + f"id/{made['id']}").get_json()
    assert "secret" not in shown and shown["id"] == made["id"]
    listed = owner.get(HOOKS).get_json()
    assert [item["id"] for item in listed["items"]] == [made["id"]]
    assert "secret" not in listed["items"][0]
    # Kept encrypted (it must be read to sign), and never in the audit log.
    db.session.rollback()
    stored = db.session.scalar(select(type_coerce(WebhookSubscription.secret, Text)))
    assert made["secret"] not in stored
    entry = db.session.scalar(select(AuditEntry).where(AuditEntry.action == "webhook.create"))
    assert entry.location_slug == "harbour" and entry.actor_id == world["owner"].id
    assert entry.changes["secret"] == ["[redacted]", "[redacted]"]
    assert entry.changes["url"] == [None, RECEIVER]


def test_events_are_each_a_known_one_of_the_subscriptions_kind(clients, world):
    owner = clients["owner"]
    problem = assert_problem(
        owner.post(HOOKS, json={"url": RECEIVER, "events": ["vote.eaten"]}), 422
    )
    assert "events" in problem["errors"]
    only_global = owner.post(HOOKS, json={"url": RECEIVER, "events": ["region.created"]})
    assert "region.created" in assert_problem(only_global, 422)["errors"]["events"][0]
    assert_problem(owner.post(HOOKS, json={"url": RECEIVER, "events": []}), 422)
    twice = create(owner, events=["vote.submitted", "vote.submitted", "reply.created"])
    assert twice["events"] == ["vote.submitted", "reply.created"]


def test_supers_manage_global_subscriptions_with_every_event(clients, world):
    made = create(clients["super"], "/webhooks/", events=["region.created", "vote.submitted"])
    assert made["location"] is None
    assert [item["id"] for item in clients["super"].get("/webhooks/").get_json()["items"]] == [
        made["id"]
    ]
    # A location's list has none of them, and cannot reach them by id.
    assert clients["super"].get(HOOKS).get_json()["items"] == []
    assert_problem(clients["super"].get(HOOKS + f"id/{made['id']}"), 404)


def test_a_location_has_at_most_ten(clients, world):
    owner = clients["owner"]
    for _ in range(PER_LOCATION):
        create(owner)
    before = database_rows()
    assert_problem(owner.post(HOOKS, json={"url": RECEIVER, "events": ["vote.submitted"]}), 409)
    assert database_rows() == before
    # Another location's count is its own.
    create(clients["other_owner"], f"/locations/{world['hill'].slug}/webhooks/")


def test_changing_one_and_enabling_it_again(clients, world):
    owner = clients["owner"]
    made = create(owner)
    path = HOOKS + f"id/{made['id']}"
    webhook = db.session.get(WebhookSubscription, uuid.UUID(made["id"]))
    webhook.enabled, webhook.disabled_reason = False, "The receiver answered 410 Gone."
    db.session.commit()
    changed = owner.put(path, json={"events": ["reply.created"], "description": None})
    assert changed.status_code == 200
    assert changed.get_json()["disabledReason"] == "The receiver answered 410 Gone."
    enabled = owner.put(path, json={"enabled": True}).get_json()
    assert (enabled["enabled"], enabled["disabledReason"], enabled["events"]) == (
        True,
        None,
        ["reply.created"],
    )
    assert_problem(owner.put(path, json={"url": "https://127.0.0.1/"}), 422)
    assert owner.delete(path).status_code == 204
    assert_problem(owner.get(path), 404)


def test_rotating_the_secret_shows_the_new_one_and_keeps_the_old_for_a_day(clients, world):
    owner = clients["owner"]
    made = create(owner)
    response = owner.post(HOOKS + f"id/{made['id']}/rotate-secret")
    assert response.status_code == 200
    rotated = response.get_json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != made["secret"]
    db.session.rollback()
    webhook = db.session.get(WebhookSubscription, uuid.UUID(made["id"]))
    assert (webhook.secret, webhook.previous_secret) == (rotated["secret"], made["secret"])
    assert webhook.previous_secret_until - utcnow() > timedelta(hours=23, minutes=59)
    actions = db.session.scalars(select(AuditEntry.action).order_by(AuditEntry.at)).all()
    assert actions[-1] == "webhook.rotate"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://127.0.0.1/hook", "loopback"),
        ("https://localhost/hook", "loopback"),  # a name that resolves to 127.0.0.1
        ("https://10.1.2.3/hook", "private"),
        ("https://192.168.0.10/hook", "private"),
        ("https://172.16.5.4/hook", "private"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://100.64.0.7/hook", "shared"),
        ("https://0.0.0.0/hook", "unspecified"),
        ("https://224.0.0.1/hook", "multicast"),
        ("https://[::1]/hook", "loopback"),
        ("https://[fd00::1]/hook", "private"),
        ("https://[fe80::1]/hook", "link-local"),
        ("https://[64:ff9b::a00:1]/hook", "private"),  # NAT64 of 10.0.0.1
        ("https://[fec0::1]/hook", "reserved"),  # site-local
        ("https://192.0.0.8/hook", "reserved"),  # IETF protocol assignments
        ("https://[3fff::1]/hook", "reserved"),  # documentation
        ("http://93.184.216.34/hook", "https"),
        ("https://user:pw@93.184.216.34/hook", "credentials"),
        ("https://no-such-host.invalid/hook", "does not resolve"),
        ("https://93.184.216.34:73245/hook", "port must be a number"),
    ],
)
def test_receivers_the_service_may_not_reach_are_refused(clients, world, url, words):
    problem = assert_problem(
        clients["owner"].post(HOOKS, json={"url": url, "events": ["vote.submitted"]}), 422
    )
    assert words in problem["errors"]["url"][0], problem
    assert db.session.scalar(select(WebhookSubscription.id)) is None


def test_a_refusal_never_tells_what_a_name_resolves_to(clients, world):
    """An owner must not learn the network's names: the kind of address, not the address."""
    problem = assert_problem(
        clients["owner"].post(
            HOOKS, json={"url": "https://localhost/hook", "events": ["vote.submitted"]}
        ),
        422,
    )
    assert problem["errors"]["url"] == ["The host 'localhost' resolves to a loopback address."]


def test_a_name_server_that_never_answers_costs_the_timeout(monkeypatch):
    import socket
    import threading
    import time

    never = threading.Event()

    def stalled(*args, **kwargs):
        never.wait(10)
        raise socket.gaierror("gave up")

    monkeypatch.setattr(socket, "getaddrinfo", stalled)
    started = time.monotonic()
    with pytest.raises(Refused, match="did not resolve in time"):
        checked_addresses("https://slow.example/hook", allow_http=False, timeout=0.5)
    assert time.monotonic() - started < 2
    never.set()


def test_an_operator_opens_chosen_private_networks_and_http(app_factory):
    allowed = parse_networks(["10.20.0.0/16"])
    assert checked_addresses("https://10.20.1.2/hook", allow_http=False, allowed=allowed)
    with pytest.raises(Refused, match="private"):
        checked_addresses("https://10.21.1.2/hook", allow_http=False, allowed=allowed)
    assert checked_addresses("http://93.184.216.34/", allow_http=True)
    with pytest.raises(Refused, match="loopback"):
        checked_addresses("http://127.0.0.1:8080/", allow_http=True, allowed=allowed)
    # IPv4 inside IPv6 is judged by the address it carries (the API's URL field refuses
    # these spellings already; the guard does not rely on it).
    for url, words in (
        ("https://[::ffff:127.0.0.1]/", "loopback"),
        ("https://[::ffff:169.254.169.254]/", "link-local"),
        ("https://[2002:a00:1::]/", "private"),  # 6to4 of 10.0.0.1
    ):
        with pytest.raises(Refused, match=words):
            checked_addresses(url, allow_http=False)


def test_a_wrong_allowed_network_stops_start_up(app_factory):
    from config import SettingsError

    with pytest.raises(SettingsError, match=r"WEBHOOK_ALLOWED_NETWORKS entry '10\.0\.0\.0/33'"):
        app_factory(WEBHOOK_ALLOWED_NETWORKS=["10.0.0.0/33"])


@pytest.mark.skipif(not PG_URL, reason="row locks are PostgreSQL's; CI's PostgreSQL pass runs it")
def test_two_subscriptions_made_at_once_never_pass_the_limit(app_factory):
    """Nine exist; two owners' requests race for the tenth: one gets it, one a 409."""
    import threading

    from directory_api.models import Role

    from .conftest import signed_in
    from .factories import grant, make_location, make_user

    apps = [app_factory() for _ in range(2)]
    with apps[0].app_context():
        harbour = make_location("harbour")
        for n in range(2):
            grant(make_user(f"owner{n}@example.com"), harbour, Role.OWNER)
        for _ in range(PER_LOCATION - 1):
            db.session.add(
                WebhookSubscription(
                    location_id=harbour.id, url=RECEIVER, events=["vote.submitted"], secret="x"
                )
            )
        db.session.commit()
        owners = [signed_in(app, f"owner{n}@example.com") for n, app in enumerate(apps)]
    statuses = []
    start = threading.Barrier(2)

    def race(app, owner) -> None:
        with app.app_context():
            start.wait()
            body = {"url": RECEIVER, "events": ["vote.submitted"]}
            statuses.append(owner.post(HOOKS, json=body).status_code)

    threads = [threading.Thread(target=race, args=pair) for pair in zip(apps, owners, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [201, 409]
    with apps[0].app_context():
        assert db.session.scalar(select(func.count()).select_from(WebhookSubscription)) == 10
