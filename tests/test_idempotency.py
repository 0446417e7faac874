"""`Idempotency-Key` on the public vote submission (API.md section 7).

A repeat with the same key and the same body within 24 hours answers the first answer again
and stores or sends nothing new; the same key with another body is a 422. The answer is
kept in the same transaction as the vote or message it answers for, keyed by scope (method
and path) and the key's SHA-256; neither the key nor the request is kept in clear.
"""

import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text, update

from directory_api.models import IdempotencyRecord, OutboxMessage, Vote, utcnow
from directory_api.platform import idempotency
from directory_api.platform.extensions import db
from directory_api.platform.idempotency import purge_expired_idempotency_keys

from .conftest import PROBLEM, queued_mail
from .factories import save
from .test_votes import BASE, EXTRA, PERSONAL, SUCCESS, TYPES

KEY = "3f0c2a4e-5b8d-4c1a-9e7f-0d6b2a8c4e1f"
HEADER = "Idempotency-Key"


def body_for(vote_type: str, **changes) -> dict:
    return {**BASE, **EXTRA[vote_type], **changes}


def submit(client, vote_type: str, body=None, *, key: str | None = KEY, location="harbour", **kw):
    headers = {HEADER: key} if key is not None else {}
    if "data" not in kw:
        kw["json"] = body_for(vote_type) if body is None else body
    return client.post(f"/locations/{location}/votes/submit/{vote_type}", headers=headers, **kw)


def count(model) -> int:
    db.session.rollback()  # see what the requests committed
    return db.session.scalar(select(func.count()).select_from(model))


def records() -> list[IdempotencyRecord]:
    db.session.rollback()
    return list(db.session.scalars(select(IdempotencyRecord)))


def age_records(hours: float) -> None:
    db.session.execute(
        update(IdempotencyRecord).values(created_at=utcnow() - timedelta(hours=hours))
    )
    db.session.commit()


def assert_key_refused(response) -> None:
    assert response.status_code == 422, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    assert set(response.get_json()["errors"]) == {HEADER}


# Repeats


def test_an_employer_vote_repeated_with_its_key_is_answered_again_and_stored_once(client, world):
    first = submit(client, "employer")
    assert first.status_code == 201
    again = submit(client, "employer")
    assert again.status_code == 201
    assert again.get_json() == first.get_json()
    assert again.mimetype == "application/json"
    assert [str(vote.id) for vote in Vote.query.all()] == [first.get_json()["id"]]
    assert count(IdempotencyRecord) == 1


@pytest.mark.parametrize("vote_type", ["btob", "btoc"])
def test_a_mailed_vote_repeated_with_its_key_is_queued_once(client, world, vote_type):
    first = submit(client, vote_type)
    again = submit(client, vote_type)
    assert first.status_code == again.status_code == 202
    assert again.get_json() == first.get_json() == {"status": "queued"}
    assert len(queued_mail()) == 1
    assert count(Vote) == 0


@pytest.mark.parametrize("vote_type", TYPES)
def test_the_same_key_with_another_body_is_422_and_stores_nothing(client, world, vote_type):
    assert submit(client, vote_type).status_code == SUCCESS[vote_type]
    changed = submit(client, vote_type, body_for(vote_type, voteBody="Another opinion."))
    assert_key_refused(changed)
    assert not any(value in changed.get_data(as_text=True) for value in PERSONAL)
    assert count(Vote) + len(queued_mail(template="vote")) == 1
    # The first answer still stands for the first body.
    assert submit(client, vote_type).status_code == SUCCESS[vote_type]
    assert count(Vote) + len(queued_mail(template="vote")) == 1


def test_the_body_is_compared_as_data_not_as_bytes(client, world):
    first = submit(client, "employer")
    reordered = dict(reversed(body_for("employer").items()))
    again = client.post(
        "/locations/harbour/votes/submit/employer/",  # a trailing slash is the same endpoint
        data=json.dumps(reordered, indent=2),
        content_type="application/json",
        headers={HEADER: KEY},
    )
    assert again.status_code == 201
    assert again.get_json() == first.get_json()
    assert count(Vote) == 1


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_form_submissions_take_a_key_and_match_the_same_fields_in_json(client, world, content_type):
    first = submit(client, "employer", data=body_for("employer"), content_type=content_type)
    assert first.status_code == 201
    again = submit(client, "employer", data=body_for("employer"), content_type=content_type)
    assert again.get_json() == first.get_json()
    as_json = submit(client, "employer")
    assert as_json.get_json() == first.get_json()
    changed = submit(
        client,
        "employer",
        data=body_for("employer", yourPosition="Cook"),
        content_type=content_type,
    )
    assert_key_refused(changed)
    assert count(Vote) == 1


def test_the_key_belongs_to_one_location_and_type(client, world):
    answers = [
        submit(client, "employer"),
        submit(client, "employer", location="hill"),
        submit(client, "btoc", body_for("btoc")),
        submit(client, "btob", body_for("btob")),
    ]
    assert [a.status_code for a in answers] == [201, 201, 202, 202]
    assert answers[0].get_json()["id"] != answers[1].get_json()["id"]
    assert count(Vote) == 2
    assert len(queued_mail(template="vote")) == 2
    assert count(IdempotencyRecord) == 4


def test_a_key_older_than_24_hours_is_new_again(client, world):
    first = submit(client, "employer")
    age_records(24.01)
    later = submit(client, "employer", body_for("employer", voteBody="A day later."))
    assert later.status_code == 201
    assert later.get_json()["id"] != first.get_json()["id"]
    assert count(Vote) == 2
    [record] = records()  # replaced, not added
    assert record.body == later.get_json()
    assert submit(client, "employer").status_code == 422  # the new body holds the key now


def test_a_key_just_under_24_hours_old_still_answers(client, world):
    first = submit(client, "employer")
    age_records(23.99)
    assert submit(client, "employer").get_json() == first.get_json()
    assert count(Vote) == 1


def test_a_repeat_is_answered_before_the_rate_limit_counts(app_factory, world):
    app = app_factory(RATELIMIT_VOTES_PER_IP="2/hour")
    client = app.test_client()
    first = submit(client, "employer")
    assert submit(client, "employer", key="another-key-1").status_code == 201
    assert submit(client, "employer", key="a-third-key-1").status_code == 429  # spent

    again = submit(client, "employer")  # the lost answer, asked for again
    assert again.status_code == 201
    assert again.get_json() == first.get_json()
    assert "X-RateLimit-Remaining" not in again.headers  # it counted nothing
    assert count(Vote) == 2
    assert submit(client, "employer", key="a-fourth-key").status_code == 429
    changed = submit(client, "employer", body_for("employer", voteBody="Another opinion."))
    assert changed.status_code == 422  # still its key's answer to another body


def test_without_a_key_every_submission_is_stored(client, world):
    for _ in range(2):
        assert submit(client, "employer", key=None).status_code == 201
        assert submit(client, "btoc", key=None).status_code == 202
    assert count(Vote) == 2
    assert len(queued_mail(template="vote")) == 2
    assert count(IdempotencyRecord) == 0


def test_a_refused_submission_keeps_no_answer(client, world):
    refused = submit(client, "employer", body_for("employer", yourEmail="not an address"))
    assert refused.status_code == 422
    assert set(refused.get_json()["errors"]) == {"yourEmail"}
    assert count(IdempotencyRecord) == 0
    # The corrected retry, under the same key, goes through.
    assert submit(client, "employer").status_code == 201
    assert count(Vote) == 1


def test_an_unknown_location_keeps_no_answer(client, world):
    assert submit(client, "employer", location="nowhere").status_code == 404
    assert count(IdempotencyRecord) == 0


# Invalid keys


@pytest.mark.parametrize(
    "key",
    [
        "",
        "1234567",  # 7 characters
        "k" * 129,
        "has a space",
        "tab\there-key",
        "caf\u00e9-key-1234",  # Latin-1, not ASCII
        "\x7fdel-key-123",
    ],
    ids=["empty", "too-short", "too-long", "space", "tab", "non-ascii", "del"],
)
@pytest.mark.parametrize("vote_type", TYPES)
def test_an_invalid_key_is_422_and_stores_nothing(client, world, vote_type, key):
    assert_key_refused(submit(client, vote_type, key=key))
    assert count(Vote) + count(OutboxMessage) + count(IdempotencyRecord) == 0


@pytest.mark.parametrize("key", ["12345678", "k" * 128, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"])
def test_keys_of_8_to_128_visible_ascii_characters_are_taken(client, world, key):
    assert submit(client, "employer", key=key).status_code == 201
    assert submit(client, "employer", key=key).status_code == 201
    assert count(Vote) == 1


# What is kept


def test_neither_the_key_nor_the_submission_is_kept_in_clear(client, world):
    submit(client, "employer")
    submit(client, "btob", body_for("btob"))
    db.session.rollback()
    rows = db.session.execute(text("SELECT * FROM idempotency_keys")).mappings().all()
    assert len(rows) == 2
    stored = " ".join(str(value) for row in rows for value in row.values())
    for secret in (KEY, *PERSONAL, BASE["businessName"], BASE["voteBody"]):
        assert secret not in stored
    assert {row["key_hash"] for row in rows} == {hashlib.sha256(KEY.encode()).hexdigest()}
    assert {row["scope"] for row in rows} == {
        "POST /locations/harbour/votes/submit/employer",
        "POST /locations/harbour/votes/submit/btob",
    }


def test_purge_deletes_only_records_older_than_24_hours(app, world):
    now = utcnow()
    for name, hours in [("old", 25), ("just-expired", 24.01), ("recent", 23.9), ("new", 0)]:
        save(
            IdempotencyRecord(
                scope=f"POST /{name}",
                key_hash="0" * 64,
                fingerprint="0" * 64,
                status=202,
                body={"status": "queued"},
                created_at=now - timedelta(hours=hours),
            )
        )
    assert purge_expired_idempotency_keys() == 2
    assert sorted(record.scope for record in records()) == ["POST /new", "POST /recent"]
    assert purge_expired_idempotency_keys() == 0


# Races


def test_a_request_that_loses_the_race_answers_as_the_winner(client, world, monkeypatch):
    """Another request with the key committed between this one's lookup and its commit
    (as it can on PostgreSQL, where the insert then waits for it): nothing of this one is
    kept, and it answers what the other answered."""
    first = submit(client, "employer")
    monkeypatch.setattr(idempotency, "find_record", missing_once(idempotency.find_record))
    again = submit(client, "employer")
    assert again.status_code == 201
    assert again.get_json() == first.get_json()
    assert count(Vote) == 1


def test_a_loser_with_another_body_is_422(client, world, monkeypatch):
    submit(client, "btob", body_for("btob"))
    monkeypatch.setattr(idempotency, "find_record", missing_once(idempotency.find_record))
    assert_key_refused(submit(client, "btob", body_for("btob", yourBusiness="Other")))
    assert len(queued_mail()) == 1


def test_when_the_answer_cannot_be_kept_neither_is_the_vote(client, world, monkeypatch):
    """An expired record the lookup missed blocks the insert: the transaction fails as a
    whole (409), so no vote exists without the answer that goes with it."""
    submit(client, "employer")
    age_records(25)
    monkeypatch.setattr(idempotency, "find_record", missing_once(idempotency.find_record))
    response = submit(client, "employer")
    assert response.status_code == 409
    assert count(Vote) == 1


def missing_once(find):
    """find_record, except that its first call finds nothing."""
    calls = []

    def fake(scope, key_hash):
        calls.append(scope)
        return None if len(calls) == 1 else find(scope, key_hash)

    return fake


@pytest.mark.parametrize("vote_type", ["employer", "btob"])
def test_two_concurrent_requests_with_one_key_store_one_vote(app, world, monkeypatch, vote_type):
    """Both look the key up before either stores anything, then both go on: one commits,
    the other waits for it at the unique index (PostgreSQL) or the write lock (SQLite),
    fails, and answers the first one's answer."""
    both_looked = threading.Barrier(2, timeout=10)
    find = idempotency.find_record
    waited = threading.local()

    def find_then_wait(scope, key_hash):
        record = find(scope, key_hash)
        if not getattr(waited, "done", False):
            waited.done = True
            both_looked.wait()
        return record

    monkeypatch.setattr(idempotency, "find_record", find_then_wait)
    clients = [app.test_client(), app.test_client()]
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda c: submit(c, vote_type, body_for(vote_type)), clients))
    assert [a.status_code for a in answers] == [SUCCESS[vote_type]] * 2
    assert answers[0].get_json() == answers[1].get_json()
    assert count(Vote) + len(queued_mail(template="vote")) == 1
    assert count(IdempotencyRecord) == 1
