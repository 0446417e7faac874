"""Webhook delivery (API.md 16) to a real HTTP receiver on loopback (allowed by the
settings here): Standard Webhooks signatures checked with the `standardwebhooks` library,
retries on the schedule, Retry-After, 410 and five days of failures, a frozen or trickling
receiver bounded by the timeout, a worker killed mid-delivery, two workers at once, the
address guard at every attempt, and the delivery log's endpoints."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from standardwebhooks import Webhook

from directory_api.models import (
    DeliveryStatus,
    Location,
    Role,
    WebhookDelivery,
    WebhookSubscription,
)
from directory_api.platform import leases
from directory_api.platform.extensions import db
from directory_api.webhooks import delivery as webhook_delivery
from directory_api.webhooks.delivery import deliver_due_webhooks

from .conftest import Clock, assert_problem, queued_mail, signed_in
from .factories import grant, make_location, make_user
from .receivers import Answer, running_receiver
from .test_votes import body_for

ROOT = Path(__file__).resolve().parent.parent
HOOKS = "/locations/harbour/webhooks/"
LOOPBACK = {"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOWED_NETWORKS": ["127.0.0.0/8"]}


@pytest.fixture
def receiver():
    yield from running_receiver()


@pytest.fixture
def hooked(app_factory):
    """An app whose receivers may be on loopback, with harbour's owner signed in."""
    app = app_factory(**LOOPBACK, WEBHOOK_TIMEOUT=1, RATELIMIT_VOTES_PER_IP="1000/hour")
    with app.app_context():
        harbour = make_location("harbour", email="desk@harbour.example")
        grant(make_user("owner@example.com"), harbour, Role.OWNER)
        yield app


@pytest.fixture
def clock(monkeypatch):
    """The queue's and the delivery's clock, moved by hand; a few seconds ahead of the
    real one, which writes the deliveries (due at once)."""
    now = Clock()
    now.advance(seconds=5)
    for module in (leases, webhook_delivery):
        monkeypatch.setattr(module, "utcnow", now)
    return now


def subscribe(app, url: str, events=("vote.submitted",), path: str = HOOKS) -> dict:
    owner = signed_in(app, "owner@example.com")
    response = owner.post(path, json={"url": url, "events": list(events)})
    assert response.status_code == 201, response.get_json()
    return {**response.get_json(), "client": owner}


def submit(app, **changes) -> dict:
    response = app.test_client().post(
        "/locations/harbour/votes/submit/employer", json=body_for("employer", **changes)
    )
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def log_of(hook: dict) -> list[dict]:
    response = hook["client"].get(HOOKS + f"id/{hook['id']}/deliveries/")
    assert response.status_code == 200, response.get_json()
    return response.get_json()["items"]


def verified(secret: str, received) -> dict:
    """The payload, once the Standard Webhooks library has checked its signature."""
    return Webhook(secret).verify(received.body, received.headers)


# --- a delivery ------------------------------------------------------------------------------


def test_a_delivery_is_signed_as_standard_webhooks_verify_it(hooked, receiver):
    hook = subscribe(hooked, receiver.url)
    vote = submit(hooked)
    assert receiver.received == []  # written with the change, sent by the worker
    report = deliver_due_webhooks()
    assert (report.delivered, report.failed) == (1, 0)
    [got] = receiver.received
    payload = verified(hook["secret"], got)
    assert payload["type"] == "vote.submitted"
    assert payload["location"] == "harbour"
    assert payload["data"]["id"] == vote["id"]
    assert got.headers["user-agent"].startswith("directory-api-webhooks/")
    assert got.headers["content-type"] == "application/json"
    assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 60
    [entry] = log_of(hook)
    assert entry["eventId"] == got.headers["webhook-id"]
    assert (entry["status"], entry["attempt"], entry["responseStatus"]) == ("delivered", 1, 200)
    assert (entry["response"], entry["error"], entry["nextAttemptAt"]) == ("ok", None, None)
    assert entry["type"] == "vote.submitted" and entry["durationMs"] >= 0
    assert deliver_due_webhooks().delivered == 0  # once


def test_a_wrong_secret_or_an_altered_body_does_not_verify(hooked, receiver):
    from standardwebhooks import WebhookVerificationError

    hook = subscribe(hooked, receiver.url)
    submit(hooked)
    deliver_due_webhooks()
    [got] = receiver.received
    other = "whsec_" + "A" * 43 + "="
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(got.body, got.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(hook["secret"]).verify(got.body.replace(b"harbour", b"harboor"), got.headers)


def test_a_failing_receiver_is_retried_on_the_schedule_with_the_same_id(hooked, receiver, clock):
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(500, body=b"busy"), Answer(302, {"Location": "https://elsewhere"}))
    submit(hooked)
    assert deliver_due_webhooks().failed == 1
    [entry] = log_of(hook)
    assert (entry["status"], entry["attempt"], entry["error"]) == ("pending", 1, "HTTP 500")
    assert entry["response"] == "busy"
    assert deliver_due_webhooks().failed == 0  # not before 5 s
    clock.advance(seconds=5.5)
    assert deliver_due_webhooks().failed == 1  # a redirect is a failure: never followed
    assert len(receiver.received) == 2
    clock.advance(minutes=4)
    assert deliver_due_webhooks().delivered == 0  # the next wait is 5 minutes
    clock.advance(minutes=2)
    assert deliver_due_webhooks().delivered == 1
    ids = {got.headers["webhook-id"] for got in receiver.received}
    assert len(receiver.received) == 3 and len(ids) == 1
    [entry] = log_of(hook)
    assert (entry["status"], entry["attempt"], entry["responseStatus"]) == ("delivered", 3, 200)


def test_retry_after_on_429_and_503_is_honoured(hooked, receiver, clock):
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(429, {"Retry-After": "120"}), Answer(503, {"Retry-After": "bogus"}))
    submit(hooked)
    deliver_due_webhooks()
    clock.advance(seconds=60)
    assert deliver_due_webhooks().failed == 0  # the schedule says 5 s; the receiver 120
    clock.advance(seconds=61)
    assert deliver_due_webhooks().failed == 1  # 503 with nonsense: the schedule (5 min)
    [entry] = log_of(hook)
    assert entry["attempt"] == 2 and entry["responseStatus"] == 503


def test_after_the_last_attempt_the_delivery_fails(hooked, receiver, clock):
    hook = subscribe(hooked, receiver.url)
    receiver.default = Answer(500)
    submit(hooked)
    for wait in (timedelta(0), *webhook_delivery.SCHEDULE):
        clock.advance(seconds=wait.total_seconds() + 1)
        assert deliver_due_webhooks().failed == 1
    clock.advance(days=2)
    assert deliver_due_webhooks().failed == 0
    [entry] = log_of(hook)
    assert (entry["status"], entry["attempt"], entry["nextAttemptAt"]) == ("failed", 10, None)
    assert len(receiver.received) == 10


def test_410_disables_the_subscription_and_mails_its_owners(hooked, receiver):
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(410))
    submit(hooked)
    assert deliver_due_webhooks().failed == 1
    shown = hook["client"].get(HOOKS + f"id/{hook['id']}").get_json()
    assert (shown["enabled"], shown["disabledReason"]) == (False, webhook_delivery.GONE)
    [entry] = log_of(hook)
    assert (entry["status"], entry["responseStatus"]) == ("failed", 410)
    [mail] = queued_mail(template="webhook_disabled")
    assert mail.recipients == ["owner@example.com"] and hook["id"] in mail.body
    submit(hooked, yourEmail="second@example.org")  # nobody listens now: nothing written
    assert len(log_of(hook)) == 1
    # Enabled again by its owner: it is no longer failing, and events flow again.
    enabled = hook["client"].put(HOOKS + f"id/{hook['id']}", json={"enabled": True})
    assert enabled.get_json()["disabledReason"] is None
    submit(hooked, yourEmail="third@example.org")
    assert deliver_due_webhooks().delivered == 1


def test_five_days_of_failures_disable_it(hooked, receiver, clock):
    hook = subscribe(hooked, receiver.url)
    receiver.default = Answer(500)
    submit(hooked)
    deliver_due_webhooks()
    clock.advance(days=2)
    submit(hooked, yourEmail="second@example.org")  # written at the real time: due now
    assert deliver_due_webhooks().failed == 2  # the first's retry, the second's first try
    assert hook["client"].get(HOOKS + f"id/{hook['id']}").get_json()["enabled"] is True
    clock.advance(days=3, seconds=1)
    deliver_due_webhooks()
    shown = hook["client"].get(HOOKS + f"id/{hook['id']}").get_json()
    assert (shown["enabled"], shown["disabledReason"]) == (False, webhook_delivery.KEPT_FAILING)
    assert len(queued_mail(template="webhook_disabled")) == 1


def test_one_success_resets_the_five_days(hooked, receiver, clock):
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(500))
    submit(hooked)
    deliver_due_webhooks()
    clock.advance(seconds=6)
    deliver_due_webhooks()  # delivered
    receiver.default = Answer(500)
    clock.advance(days=6)
    submit(hooked, yourEmail="second@example.org")
    deliver_due_webhooks()
    assert hook["client"].get(HOOKS + f"id/{hook['id']}").get_json()["enabled"] is True


# --- bounded by the timeout ------------------------------------------------------------------


def test_a_frozen_receiver_holds_a_worker_no_longer_than_the_timeout(hooked, receiver):
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(hold=True))
    submit(hooked)
    started = time.monotonic()
    assert deliver_due_webhooks().failed == 1
    assert time.monotonic() - started < 3  # WEBHOOK_TIMEOUT is 1 s here
    [entry] = log_of(hook)
    assert entry["error"] == "Timeout: no answer within 1s" and entry["status"] == "pending"
    receiver.release()


def test_an_answer_that_never_ends_is_its_status_and_bounded(hooked, receiver):
    """200 at once, then a body trickled a byte at a time without end: delivered, read no
    further than the timeout allows, and what the log keeps is bounded."""
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(200, wait=0.2, drip=True))
    submit(hooked)
    started = time.monotonic()
    assert deliver_due_webhooks().delivered == 1
    assert time.monotonic() - started < 3
    [entry] = log_of(hook)
    assert entry["responseStatus"] == 200 and len(entry["response"]) <= 1024


def test_a_huge_answer_keeps_its_first_kibibyte(hooked, receiver):
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(500, body=b"y" * 5_000_000))
    submit(hooked)
    deliver_due_webhooks()
    [entry] = log_of(hook)
    assert entry["response"] == "y" * 1024


# --- the address guard at every attempt -------------------------------------------------------


def test_every_attempt_checks_the_address_again(app_factory, hooked, receiver):
    """A receiver allowed when subscribed is refused at the attempt once the setting no
    longer allows it: nothing reaches it."""
    hook = subscribe(hooked, receiver.url)
    submit(hooked)
    strict = app_factory(WEBHOOK_ALLOW_HTTP=True)
    with strict.app_context():
        assert deliver_due_webhooks().failed == 1
    assert receiver.received == []
    [entry] = log_of(hook)
    # The kind of address, never the address: it would tell what a name is inside.
    assert entry["error"] == "Refused: The host '127.0.0.1' resolves to a loopback address."


def test_the_connection_goes_to_the_address_checked(hooked, receiver, monkeypatch):
    """DNS rebinding: a name that resolves to an allowed address when checked and to
    another one a moment later is reached at the first; it is resolved once per attempt."""
    port = int(receiver.url.split(":")[2].split("/")[0])
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1"] + ["127.0.0.2"] * 10)
    asked = []

    def rebinding(host, *args, **kwargs):
        if host != "receiver.test":
            return real(host, *args, **kwargs)
        asked.append(host)
        address = next(answers)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setitem(hooked.config, "WEBHOOK_ALLOWED_NETWORKS", ["127.0.0.1/32"])
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    subscribe(hooked, f"http://receiver.test:{port}/hooks")  # checked: 127.0.0.1
    answers = iter(["127.0.0.1", "127.0.0.2"])
    submit(hooked)
    assert deliver_due_webhooks().delivered == 1
    assert len(asked) == 2  # once at creation, once at the attempt
    [got] = receiver.received
    assert got.headers["host"] == f"receiver.test:{port}"


# --- secret rotation -------------------------------------------------------------------------


def test_for_a_day_after_rotation_both_secrets_sign(hooked, receiver, clock):
    hook = subscribe(hooked, receiver.url)
    rotated = hook["client"].post(HOOKS + f"id/{hook['id']}/rotate-secret").get_json()
    submit(hooked)
    deliver_due_webhooks()
    [got] = receiver.received
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    verified(rotated["secret"], got)
    verified(hook["secret"], got)  # a receiver that has not changed its copy yet
    clock.advance(hours=24, seconds=1)
    submit(hooked, yourEmail="later@example.org")
    deliver_due_webhooks()
    later = receiver.received[1]
    assert len(later.headers["webhook-signature"].split(" ")) == 1
    verified(rotated["secret"], later)


# --- workers -----------------------------------------------------------------------------------


def test_two_workers_never_send_one_delivery_twice(app_factory, hooked, receiver):
    subscribe(hooked, receiver.url)
    for n in range(12):
        submit(hooked, yourEmail=f"voter{n}@example.org")
    receiver.default = Answer(200, wait=0.05)
    reports = []

    def worker(app) -> None:
        with app.app_context():
            reports.append(deliver_due_webhooks())
            db.session.remove()

    # Built here: CPython 3.11 may fail compiling code in two threads at once.
    apps = [app_factory(**LOOPBACK, WEBHOOK_TIMEOUT=5) for _ in range(2)]
    threads = [threading.Thread(target=worker, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(report.delivered for report in reports) == 12
    ids = [got.headers["webhook-id"] for got in receiver.received]
    assert len(ids) == len(set(ids)) == 12


WORKER = """
import sys
from directory_api import create_app
from directory_api.webhooks.delivery import deliver_due_webhooks
app = create_app(
    "testing",
    SQLALCHEMY_DATABASE_URI=sys.argv[1],
    WEBHOOK_ALLOW_HTTP=True,
    WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"],
    WEBHOOK_TIMEOUT=60,
    OUTBOX_LEASE_SECONDS=120,
)
with app.app_context():
    deliver_due_webhooks()
"""


def test_a_worker_killed_mid_delivery_leaves_it_to_be_delivered_later_once(
    hooked, receiver, migrated_database, clock
):
    """kill -9 while the receiver has the request and has not answered: after the lease,
    another worker delivers it, with the same webhook-id; it is delivered once."""
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(hold=True))
    submit(hooked)
    worker = subprocess.Popen(  # noqa: S603 (our own arguments)
        [sys.executable, "-c", WORKER, migrated_database], cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 30
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert receiver.received, "the worker never reached the receiver"
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
    assert deliver_due_webhooks().delivered == 0  # still leased by the dead worker
    clock.advance(seconds=121)
    assert deliver_due_webhooks().delivered == 1
    assert deliver_due_webhooks().delivered == 0
    first, second = receiver.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    [entry] = log_of(hook)
    assert (entry["status"], entry["attempt"]) == ("delivered", 2)
    receiver.release()


def test_the_worker_delivers_webhooks_beside_mail_in_threads(hooked, receiver):
    """`flask outbox worker`'s loop: a frozen receiver holds one webhook thread while the
    mail and the other deliveries go on."""
    from directory_api.cli import run_worker

    subscribe(hooked, receiver.url)
    receiver.answer(Answer(hold=True))
    submit(hooked)
    submit(hooked, yourEmail="second@example.org")
    stop = threading.Event()
    hooked.config["WEBHOOK_TIMEOUT"] = 5
    runner = threading.Thread(target=run_in_context, args=(hooked, run_worker, 0.05, None, stop))
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if delivered_count() == 1 and all(m.status == "sent" for m in queued_mail()):
                break
            time.sleep(0.05)
        assert delivered_count() == 1  # the second, while the first is held
        receipts = queued_mail()
        assert len(receipts) == 2  # the voters' receipts: sent meanwhile, not delayed
        assert {message.status for message in receipts} == {"sent"}
        assert len(receiver.received) == 2 and not receiver.released.is_set()
    finally:
        receiver.release()
        stop.set()
        runner.join(30)
    assert not runner.is_alive()


def run_in_context(app, function, *args) -> None:
    with app.app_context():
        function(*args)
        db.session.remove()


def delivered_count() -> int:
    db.session.rollback()
    status = WebhookDelivery.status == DeliveryStatus.DELIVERED
    return db.session.scalar(select(func.count()).select_from(WebhookDelivery).where(status))


# --- the log's endpoints ------------------------------------------------------------------------


def test_redeliver_sends_the_event_again_with_its_id(hooked, receiver):
    hook = subscribe(hooked, receiver.url)
    submit(hooked)
    deliver_due_webhooks()
    [entry] = log_of(hook)
    again = hook["client"].post(HOOKS + f"id/{hook['id']}/deliveries/id/{entry['id']}/redeliver")
    assert again.status_code == 202
    made = again.get_json()
    assert (made["eventId"], made["status"], made["attempt"]) == (entry["eventId"], "pending", 0)
    deliver_due_webhooks()
    first, second = receiver.received
    assert first.body == second.body
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert [item["id"] for item in log_of(hook)] == [made["id"], entry["id"]]  # newest first
    pending = hook["client"].get(HOOKS + f"id/{hook['id']}/deliveries/?status=pending")
    assert pending.get_json()["total"] == 0
    unknown = hook["client"].post(HOOKS + f"id/{hook['id']}/deliveries/id/{uuid.uuid4()}/redeliver")
    assert_problem(unknown, 404)


def test_test_queues_a_webhook_test_for_this_subscription_only(hooked, receiver):
    hook = subscribe(hooked, receiver.url, events=["business.created"])
    other = subscribe(hooked, receiver.url + "/other", events=["business.created"])
    response = hook["client"].post(HOOKS + f"id/{hook['id']}/test")
    assert response.status_code == 202
    assert response.get_json()["type"] == "webhook.test"
    deliver_due_webhooks()
    [got] = receiver.received
    payload = verified(hook["secret"], got)
    assert payload["type"] == "webhook.test"
    assert payload["data"] == {"webhook": hook["id"]} and payload["location"] == "harbour"
    assert log_of(other) == []
    hook["client"].put(HOOKS + f"id/{hook['id']}", json={"enabled": False})
    assert_problem(hook["client"].post(HOOKS + f"id/{hook['id']}/test"), 409)


def test_tests_and_redeliveries_share_one_allowance_per_account(app_factory, receiver):
    """Sending on demand is limited per account (RATELIMIT_WEBHOOK_SENDS_PER_ACCOUNT): a
    manager cannot turn the service into a flood of the URL they registered. Another
    account has its own allowance; nothing past the limit is queued."""
    app = app_factory(**LOOPBACK, RATELIMIT_WEBHOOK_SENDS_PER_ACCOUNT="3/hour")
    with app.app_context():
        harbour = make_location("harbour")
        grant(make_user("owner@example.com"), harbour, Role.OWNER)
        grant(make_user("second@example.com"), harbour, Role.OWNER)
        hook = subscribe(app, receiver.url, events=["business.created"])
        one = HOOKS + f"id/{hook['id']}/"
        first = hook["client"].post(one + "test")
        assert first.status_code == 202
        again = one + f"deliveries/id/{first.get_json()['id']}/redeliver"
        assert [hook["client"].post(again).status_code for _ in range(2)] == [202, 202]
        refused = assert_problem(hook["client"].post(one + "test"), 429)
        assert refused["detail"].startswith(
            "At most 3 webhook tests and redeliveries for one account per hour; try again in "
        )
        assert_problem(hook["client"].post(again), 429)
        assert len(log_of(hook)) == 3  # nothing queued past the limit
        second = signed_in(app, "second@example.com")
        assert second.post(one + "test").status_code == 202


def test_a_deleted_subscription_takes_its_deliveries(hooked, receiver):
    hook = subscribe(hooked, receiver.url)
    receiver.default = Answer(500)
    submit(hooked)
    deliver_due_webhooks()
    assert hook["client"].delete(HOOKS + f"id/{hook['id']}").status_code == 204
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0


def test_the_log_is_kept_webhook_log_days(hooked, receiver, clock):
    hook = subscribe(hooked, receiver.url)
    submit(hooked)
    deliver_due_webhooks()
    receiver.default = Answer(500)
    submit(hooked, yourEmail="pending@example.org")
    deliver_due_webhooks()
    assert webhook_delivery.purge_webhook_log(clock() + timedelta(days=29)) == 0
    assert webhook_delivery.purge_webhook_log(clock() + timedelta(days=31)) == 1
    assert [entry["status"] for entry in log_of(hook)] == ["pending"]  # never a pending one


def test_a_global_subscription_gets_every_locations_events(hooked, receiver):
    from .conftest import signed_in as sign_in

    make_user("root@example.com", is_super=True)
    root = sign_in(hooked, "root@example.com")
    made = root.post("/webhooks/", json={"url": receiver.url, "events": ["vote.submitted"]})
    assert made.status_code == 201
    secret = made.get_json()["secret"]
    make_location("hill")
    submit(hooked)
    hooked.test_client().post("/locations/hill/votes/submit/employer", json=body_for("employer"))
    deliver_due_webhooks()
    places = sorted(verified(secret, got)["location"] for got in receiver.received)
    assert places == ["harbour", "hill"]
    log = root.get(f"/webhooks/id/{made.get_json()['id']}/deliveries/").get_json()
    assert log["total"] == 2


def test_a_subscription_of_another_location_hears_nothing(hooked, receiver):
    hill = make_location("hill")
    grant(make_user("hill-owner@example.com"), hill, Role.OWNER)
    owner = signed_in(hooked, "hill-owner@example.com")
    made = owner.post(
        "/locations/hill/webhooks/", json={"url": receiver.url, "events": ["vote.submitted"]}
    )
    assert made.status_code == 201
    submit(hooked)  # at harbour
    assert deliver_due_webhooks().delivered == 0
    assert receiver.received == []
    assert db.session.scalar(select(Location.slug).where(Location.id == hill.id)) == "hill"
    assert db.session.scalar(select(func.count()).select_from(WebhookSubscription)) == 1


def test_the_readmes_receiver_accepts_a_delivery_and_refuses_a_forgery(hooked, receiver):
    """The README's receiver code, as written, on a real delivery."""
    from .test_readme import blocks_of

    [code] = blocks_of("## Webhooks", "python")
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 (the README's own example)
    hook = subscribe(hooked, receiver.url)
    submit(hooked)
    deliver_due_webhooks()
    [got] = receiver.received
    event = namespace["receive"](got.body, got.headers, hook["secret"])
    assert event["type"] == "vote.submitted"
    forged = got.body.replace(b'"active":false', b'"active":true')
    assert forged != got.body
    assert namespace["receive"](forged, got.headers, hook["secret"]) is None


def test_flask_outbox_send_delivers_webhooks_too(hooked, receiver):
    from .conftest import send_outbox

    subscribe(hooked, receiver.url)
    submit(hooked)
    assert send_outbox(hooked).strip().endswith("webhooks delivered 1, failed 0")
    assert len(receiver.received) == 1


# --- https: the same bounds through TLS ---------------------------------------------------------


@pytest.fixture
def tls_files(tmp_path):
    """A self-signed certificate for 127.0.0.1, and a client context that trusts it."""
    import datetime as dt
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "receiver")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    client = ssl.create_default_context(cafile=str(cert_file))
    return cert_file, key_file, client


def read_request(connection) -> bytes:
    """A whole HTTP request (its headers, then as many bytes as Content-Length says)."""
    import re

    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    while length and len(body) < int(length.group(1)):
        body += connection.recv(65536)
    return body


def tls_server(cert_file, key_file, handle) -> tuple[str, threading.Event]:
    """A TLS server on loopback that runs `handle(connection, stop)` for each client."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(raw, server_side=True) as connection:
                    handle(connection, stop)
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    stop.add_closer = listener.close  # type: ignore[attr-defined]
    return f"https://127.0.0.1:{listener.getsockname()[1]}/hooks", stop


def test_https_is_verified_and_answers(tls_files):
    from directory_api.platform.outbound import post
    from directory_api.platform.ssrf import parse_networks

    cert_file, key_file, client = tls_files

    def answer(connection, stop) -> None:
        read_request(connection)
        connection.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")

    url, stop = tls_server(cert_file, key_file, answer)
    try:
        reply = post(
            url,
            b"{}",
            {"Content-Type": "application/json"},
            timeout=5,
            allow_http=False,
            allowed=parse_networks(["127.0.0.0/8"]),
            context=client,
        )
        assert reply.status == 204
    finally:
        stop.set()
        stop.add_closer()


def test_a_trickling_https_receiver_is_cut_at_the_timeout(tls_files):
    """Through TLS too, a receiver sending its headers a byte at a time is cut off when
    the time is up (the watchdog reaches the connection under the TLS layer)."""
    from directory_api.platform.outbound import TimeUp, post
    from directory_api.platform.ssrf import parse_networks

    cert_file, key_file, client = tls_files

    def trickle(connection, stop) -> None:
        read_request(connection)
        connection.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.wait(0.2):
            connection.sendall(b"X")

    url, stop = tls_server(cert_file, key_file, trickle)
    started = time.monotonic()
    try:
        with pytest.raises(TimeUp):
            post(
                url,
                b"{}",
                {},
                timeout=1,
                allow_http=False,
                allowed=parse_networks(["127.0.0.0/8"]),
                context=client,
            )
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        stop.add_closer()


# --- what a hostile receiver answers ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "wait"),
    [
        ("99999999999999999999", timedelta(hours=24)),  # past any clock: the longest wait
        ("\u00b2", timedelta(seconds=5)),  # a digit to Python, not to HTTP: the schedule
        ("Wed, 31 Dec 9999 23:59:59 GMT", timedelta(hours=24)),
        ("Mon, 99 Foo 2026", timedelta(seconds=5)),
    ],
)
def test_any_retry_after_is_a_wait_never_a_crash(hooked, receiver, clock, value, wait):
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(429, {"Retry-After": value}))
    submit(hooked)
    assert deliver_due_webhooks().failed == 1
    [entry] = log_of(hook)
    assert entry["status"] == "pending" and entry["attempt"] == 1
    db.session.rollback()
    due = db.session.scalar(select(WebhookDelivery.next_attempt_at))
    assert abs((due - clock()) - wait) < timedelta(seconds=2)


def test_a_nul_in_the_answer_is_kept_as_a_replacement(hooked, receiver):
    """PostgreSQL keeps no NUL in text: the log keeps U+FFFD in its place."""
    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(500, body=b"bad\x00answer"))
    submit(hooked)
    assert deliver_due_webhooks().failed == 1
    [entry] = log_of(hook)
    assert entry["response"] == "bad\ufffdanswer" and entry["status"] == "pending"


def test_a_worker_that_lost_its_lease_changes_nothing(hooked, receiver):
    """Its delivery was taken over: the 410 it got neither disables the subscription nor
    mails anyone (the worker that holds the claim will judge)."""
    from directory_api.platform.leases import claim_next

    hook = subscribe(hooked, receiver.url)
    receiver.answer(Answer(410))
    submit(hooked)
    stale = claim_next(WebhookDelivery, DeliveryStatus.PENDING, webhook_delivery.lease())
    db.session.execute(
        WebhookDelivery.__table__.update().values(attempts=WebhookDelivery.attempts + 1)
    )
    db.session.commit()
    assert webhook_delivery.deliver(stale) is False
    assert hook["client"].get(HOOKS + f"id/{hook['id']}").get_json()["enabled"] is True
    assert queued_mail(template="webhook_disabled") == []


def test_erasing_a_voters_data_tells_receivers_the_votes_are_gone(hooked, receiver):
    from directory_api.privacy import erase

    subscribe(hooked, receiver.url, events=["vote.submitted", "vote.deleted"])
    vote = submit(hooked)
    erased = erase(body_for("employer")["yourEmail"])
    assert erased["votes"] == 1
    deliver_due_webhooks()
    kinds = [(got.json["type"], got.json["data"]) for got in receiver.received]
    assert ("vote.deleted", {"id": vote["id"]}) in kinds
    deleted = next(got.json for got in receiver.received if got.json["type"] == "vote.deleted")
    assert deleted["location"] == "harbour"
