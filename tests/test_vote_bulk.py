"""Bulk moderation (API.md 15): one action on many votes of a location, by ids or by a
filter, all or nothing, with a dry run and `Idempotency-Key`.

Who may call it is the role matrix's; here is what a bulk action does.
"""

import threading
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import event, insert, select
from sqlalchemy.orm import Session

from directory_api.models import AuditEntry, Employer, User, Vote, VoteType, utcnow
from directory_api.platform.extensions import db
from directory_api.platform.idempotency import IdempotencyRecord

from .conftest import PG_URL, assert_problem, database_rows, queued_mail
from .factories import make_listing, make_vote

VOTES = "/locations/harbour/votes/"
BULK = VOTES + "bulk"


@pytest.fixture
def employers(world) -> dict[str, Employer]:
    return {
        slug: make_listing("employer", world["harbour"], slug, name=name)
        for slug, name in (("works", "Harbour Works"), ("mill", "Old Mill"))
    }


@pytest.fixture
def votes(world, employers) -> dict[str, str]:
    """Harbour: three pending votes for the works (one suspect, one unconfirmed), an
    active one for the mill; hill: one pending."""

    def vote(location, number: int, **fields) -> str:
        made = make_vote(location, your_email=f"voter{number}@example.org", **fields)
        return str(made.id)

    works, mill = employers["works"].id, employers["mill"].id
    return {
        "a": vote(world["harbour"], 1, employer_id=works, confirmed=True),
        "b": vote(world["harbour"], 2, employer_id=works, confirmed=True, suspect=True),
        "c": vote(world["harbour"], 3, employer_id=works),
        "d": vote(world["harbour"], 4, employer_id=mill, active=True, confirmed=True),
        "hill": vote(world["hill"], 5),
    }


def stored(vote_id: str, column):
    db.session.rollback()
    return db.session.scalar(select(column).where(Vote.id == uuid.UUID(vote_id)))


def bulk(client, status: int = 200, headers=None, **body) -> dict:
    response = client.post(BULK, json=body, headers=headers or {})
    assert response.status_code == status, response.get_json()
    return response.get_json()


def summary(client) -> dict:
    return client.get(VOTES + "summary").get_json()


def test_activating_by_ids_changes_those_votes_and_counts_them(clients, votes):
    answer = bulk(clients["admin"], ids=[votes["a"], votes["b"], votes["d"]], action="activate")
    assert answer == {"matched": 3, "changed": 2, "dryRun": False}
    assert [stored(votes[name], Vote.active) for name in "abcd"] == [True, True, False, True]
    figures = summary(clients["owner"])
    assert (figures["active"], figures["pending"], figures["unanswered"]) == (3, 1, 3)
    assert figures["employers"] == [
        {"employer": "works", "name": "Harbour Works", "active": 2, "pending": 1},
        {"employer": "mill", "name": "Old Mill", "active": 1, "pending": 0},
    ]
    results = clients["anonymous"].get(VOTES + "results").get_json()["items"]
    assert [(row["employer"], row["votes"]) for row in results] == [("works", 2), ("mill", 1)]


def test_each_changed_vote_is_one_audit_entry_with_the_requests_id(clients, world, votes):
    response = clients["admin"].post(
        BULK,
        json={"ids": [votes["a"], votes["b"], votes["d"]], "action": "activate"},
        headers={"X-Request-ID": "bulk-activate-1"},
    )
    assert response.status_code == 200
    db.session.rollback()
    entries = db.session.scalars(select(AuditEntry).where(AuditEntry.action == "vote.update")).all()
    assert sorted(str(entry.target_id) for entry in entries) == sorted([votes["a"], votes["b"]])
    for entry in entries:
        assert entry.request_id == "bulk-activate-1"
        assert entry.actor_id == world["admin"].id
        assert entry.location_slug == "harbour"
        assert entry.changes == {"active": [False, True]}


def test_an_id_that_is_not_a_vote_of_the_location_is_404_naming_it_and_changes_nothing(
    clients, votes
):
    owner = clients["owner"]  # signed in before the rows are read
    before = database_rows()
    stranger = str(uuid.uuid4())
    response = owner.post(
        BULK, json={"ids": [votes["a"], votes["hill"], stranger], "action": "delete"}
    )
    problem = assert_problem(response, 404)
    assert sorted(problem["ids"]) == sorted([votes["hill"], stranger])
    assert votes["hill"] in problem["detail"] and stranger in problem["detail"]
    assert database_rows() == before


def test_activating_an_unconfirmed_vote_when_confirmation_is_required_is_409_naming_it(
    app, clients, votes
):
    app.config["VOTE_REQUIRE_CONFIRMATION"] = True
    owner = clients["owner"]
    before = database_rows()
    # The unconfirmed vote is the last: the ones before it stay as they were.
    response = owner.post(
        BULK, json={"ids": [votes["a"], votes["b"], votes["c"]], "action": "activate"}
    )
    problem = assert_problem(response, 409)
    assert problem["ids"] == [votes["c"]]
    assert votes["c"] in problem["detail"]
    assert database_rows() == before
    # Confirmed ones alone pass; so does a dry run's count of them.
    assert bulk(clients["owner"], ids=[votes["a"], votes["b"]], action="activate")["changed"] == 2


def test_a_failure_at_the_last_vote_leaves_every_vote_as_it_was(app, clients, votes):
    """The database refusing the last vote's change (here: a fault injected at its update)
    rolls back the changes to the votes before it."""
    last = uuid.UUID(max(votes["a"], votes["b"], votes["c"]))  # locked, changed in id order

    def refuse(_mapper, _connection, vote) -> None:
        if vote.id == last:
            raise RuntimeError("the database refused the last vote")

    owner = clients["owner"]
    before = database_rows()
    event.listen(Vote, "before_update", refuse)
    try:
        response = owner.post(
            BULK, json={"ids": [votes["a"], votes["b"], votes["c"]], "action": "activate"}
        )
    finally:
        event.remove(Vote, "before_update", refuse)
    assert_problem(response, 500)
    assert database_rows() == before
    assert summary(clients["owner"])["active"] == 1


def test_a_dry_run_counts_and_changes_nothing(clients, votes):
    owner = clients["owner"]
    before = database_rows()
    answer = bulk(owner, filter={"active": False}, action="delete", dryRun=True)
    assert answer == {"matched": 3, "changed": 3, "dryRun": True}
    assert database_rows() == before


def test_a_filter_selects_by_every_field_given(clients, world, votes):
    owner = clients["owner"]
    assert bulk(owner, filter={"suspect": True}, action="clearSuspect")["changed"] == 1
    assert stored(votes["b"], Vote.suspect) is False
    assert bulk(owner, filter={"confirmed": False}, action="activate", dryRun=True) == {
        "matched": 1,
        "changed": 1,
        "dryRun": True,
    }
    assert bulk(owner, filter={"employer": "mill"}, action="deactivate") == {
        "matched": 1,
        "changed": 1,
        "dryRun": False,
    }
    assert (
        bulk(owner, filter={"active": False, "employer": "works"}, action="activate")["changed"]
        == 3
    )
    # Every vote is now of some employer; none of hill's is touched.
    assert stored(votes["hill"], Vote.active) is False
    future = (utcnow() + timedelta(days=1)).isoformat()
    assert (
        bulk(owner, filter={"submittedBefore": future}, action="activate", dryRun=True)["matched"]
        == 4
    )
    unlinked = make_vote(world["harbour"], your_email="nobody@example.org")
    assert bulk(owner, filter={"employer": None}, action="activate") == {
        "matched": 1,
        "changed": 1,
        "dryRun": False,
    }
    assert stored(str(unlinked.id), Vote.active) is True
    past = (utcnow() - timedelta(days=1)).isoformat()
    assert bulk(owner, filter={"submittedBefore": past}, action="delete")["matched"] == 0


def test_duplicates_are_selected_and_deleting_a_first_vote_promotes_its_duplicate(
    clients, world, employers, votes
):
    first = make_vote(world["harbour"], your_email="twice@example.org", employer_id=None)
    again = make_vote(world["harbour"], your_email="twice@example.org", duplicate_of_id=first.id)
    third = make_vote(world["harbour"], your_email="twice@example.org", duplicate_of_id=first.id)
    assert bulk(clients["owner"], filter={"duplicate": True}, action="activate")["matched"] == 2
    assert bulk(clients["owner"], ids=[str(first.id)], action="delete")["changed"] == 1
    assert stored(str(again.id), Vote.duplicate_of_id) is None
    assert stored(str(third.id), Vote.duplicate_of_id) == again.id
    assert summary(clients["owner"])["duplicates"] == 1


def test_deleting_takes_the_votes_and_their_receipts(clients, votes):
    client = clients["anonymous"]
    submission = {
        "yourName": "Rae",
        "yourEmail": "rae@example.org",
        "yourPhone": "+44 20 7946 0019",
        "businessName": "Harbour Works",
        "businessBranch": "Quay",
        "voteBody": "Good.",
        "yourPosition": "Clerk",
    }
    response = client.post(VOTES + "submit/employer", json=submission)
    assert response.status_code == 201
    submitted = response.get_json()["id"]
    assert queued_mail("rae@example.org")
    answer = bulk(clients["owner"], ids=[submitted, votes["c"]], action="delete")
    assert answer == {"matched": 2, "changed": 2, "dryRun": False}
    assert stored(submitted, Vote.id) is None and stored(votes["c"], Vote.id) is None
    assert queued_mail("rae@example.org") == []  # the receipt held Rae's address
    deleted = db.session.scalars(
        select(AuditEntry.target_id).where(AuditEntry.action == "vote.delete")
    ).all()
    assert sorted(map(str, deleted)) == sorted([submitted, votes["c"]])
    assert summary(clients["owner"])["pending"] == 2


def test_set_employer_links_or_unlinks_and_the_results_follow(clients, votes):
    owner = clients["owner"]
    answer = bulk(owner, ids=[votes["a"], votes["d"]], action="setEmployer", employer="mill")
    assert answer == {"matched": 2, "changed": 1, "dryRun": False}
    assert owner.get(VOTES + f"id/{votes['a']}").get_json()["employer"] == "mill"
    bulk(owner, ids=[votes["d"]], action="setEmployer", employer=None)
    assert owner.get(VOTES + f"id/{votes['d']}").get_json()["employer"] is None
    assert clients["anonymous"].get(VOTES + "results").get_json()["items"] == []
    assert summary(owner)["employers"] == [
        {"employer": "works", "name": "Harbour Works", "active": 0, "pending": 2},
        {"employer": "mill", "name": "Old Mill", "active": 0, "pending": 1},
    ]


def test_a_filter_past_5000_votes_is_422_and_changes_nothing(clients, world):
    now = utcnow()
    rows = [
        {
            "id": uuid.uuid4(),
            "location_id": world["harbour"].id,
            "type": VoteType.EMPLOYER,
            "active": False,
            "confirmed": False,
            "suspect": False,
            "business_name": "Acme",
            "vote_body": "Good",
            "created_at": now,
            "updated_at": now,
        }
        for _ in range(5001)
    ]
    db.session.execute(insert(Vote), rows)
    db.session.commit()
    problem = assert_problem(
        clients["owner"].post(BULK, json={"filter": {}, "action": "activate"}), 422
    )
    assert "5,000" in problem["errors"]["filter"][0]
    assert db.session.scalar(select(Vote.id).where(Vote.active.is_(True))) is None
    narrowed = {"filter": {"submittedBefore": now.isoformat()}, "action": "activate"}
    assert clients["owner"].post(BULK, json=narrowed).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "activate"}, "ids"),
        (
            {"ids": ["00000000-0000-4000-8000-000000000000"], "filter": {}, "action": "activate"},
            "ids",
        ),
        ({"ids": [], "action": "activate"}, "ids"),
        ({"ids": [str(uuid.uuid4()) for _ in range(501)], "action": "activate"}, "ids"),
        ({"ids": ["not-a-uuid"], "action": "activate"}, "ids"),
        ({"filter": {}, "action": "approve"}, "action"),
        ({"filter": {}, "action": "setEmployer"}, "employer"),
        ({"filter": {}, "action": "activate", "employer": "mill"}, "employer"),
        ({"filter": {}, "action": "setEmployer", "employer": "nowhere"}, "employer"),
        ({"filter": {"employer": "nowhere"}, "action": "activate"}, "filter"),
        ({"filter": {"state": "new"}, "action": "activate"}, "filter"),
        ({"filter": {"submittedBefore": "yesterday"}, "action": "activate"}, "filter"),
        ({"filter": {"active": "yes"}, "action": "activate"}, "filter"),
        ({"filter": {}, "action": "activate", "dryRun": "true"}, "dryRun"),
    ],
)
def test_a_malformed_request_is_422_on_its_field(clients, votes, body, field):
    owner = clients["owner"]
    before = database_rows()
    problem = assert_problem(owner.post(BULK, json=body), 422)
    assert field in problem["errors"], problem
    assert database_rows() == before


def test_idempotency_key_answers_a_repeat_once_and_per_account(clients, world, votes):
    key = {"Idempotency-Key": "bulk-delete-0001"}
    body = {"filter": {"active": False}, "action": "delete"}
    first = bulk(clients["owner"], headers=key, **body)
    assert first == {"matched": 3, "changed": 3, "dryRun": False}
    assert bulk(clients["owner"], headers=key, **body) == first  # not {"matched": 0, …}
    other = clients["owner"].post(BULK, json={**body, "action": "activate"}, headers=key)
    assert_problem(other, 422)
    # Another moderator's key is their own: the same key runs their request.
    assert bulk(clients["admin"], headers=key, **body) == {
        "matched": 0,
        "changed": 0,
        "dryRun": False,
    }
    # Kept under the accounts' ids: never what identifies their sessions.
    db.session.rollback()
    scopes = db.session.scalars(select(IdempotencyRecord.scope)).all()
    path = "POST /locations/harbour/votes/bulk"
    expected = [f"{path} as {world[name].id}" for name in ("owner", "admin")]
    assert sorted(scopes) == sorted(expected)
    tokens = db.session.scalars(select(User.session_token)).all()
    assert not any(token in scope for token in tokens for scope in scopes)


@pytest.mark.skipif(not PG_URL, reason="row locks are PostgreSQL's; CI's PostgreSQL pass runs it")
def test_a_deletion_locks_the_duplicate_it_promotes_so_the_counts_stay_exact(
    clients, world, employers
):
    """A moderator deactivating a duplicate while another deletes its first vote waits for
    the deletion, then changes the vote as it is: the results count no vote that is not
    active (read without a lock, the promoted duplicate kept its old `active` and counted
    once more)."""
    works = employers["works"].id
    first = make_vote(world["harbour"], your_email="x@example.org", employer_id=works, active=True)
    again = make_vote(
        world["harbour"],
        your_email="x@example.org",
        employer_id=works,
        active=True,
        duplicate_of_id=first.id,
    )
    owner, admin = clients["owner"], clients["admin"]
    others: list[threading.Thread] = []
    answers: list[int] = []

    def meanwhile(session, _context, _instances) -> None:
        promoted = any(isinstance(row, Vote) and row.id == again.id for row in session.dirty)
        if others or not promoted:
            return
        change = {"id": str(again.id), "active": False}
        other = threading.Thread(
            target=lambda: answers.append(admin.put(VOTES, json=change).status_code)
        )
        others.append(other)
        other.start()
        other.join(1.0)
        assert other.is_alive()  # waiting for the deletion's lock on the duplicate

    event.listen(Session, "before_flush", meanwhile)
    try:
        assert bulk(owner, ids=[str(first.id)], action="delete")["changed"] == 1
    finally:
        event.remove(Session, "before_flush", meanwhile)
    others[0].join(30)
    assert answers == [200]
    assert clients["anonymous"].get(VOTES + "results").get_json()["items"] == []
    figures = summary(owner)
    assert (figures["active"], figures["pending"], figures["duplicates"]) == (0, 1, 0)


@pytest.mark.skipif(not PG_URL, reason="row locks are PostgreSQL's; CI's PostgreSQL pass runs it")
def test_a_recount_waiting_for_a_change_counts_it_after_it_commits(app, clients, votes):
    """A recount (erasure runs one) that meets a vote change in flight waits for it and
    counts what it committed; it never writes counts from before the wait over it."""
    owner = clients["owner"]
    recounts: list[threading.Thread] = []

    def meanwhile(session, _context) -> None:
        if recounts:
            return

        def recount() -> None:
            with app.app_context():
                result = app.test_cli_runner().invoke(args=["listings", "recount"])
                assert result.exit_code == 0, result.output

        other = threading.Thread(target=recount)
        recounts.append(other)
        other.start()
        other.join(1.0)
        assert other.is_alive()  # waiting for this change's locks on the counts

    event.listen(Session, "after_flush", meanwhile)
    try:
        assert bulk(owner, ids=[votes["a"], votes["b"]], action="activate")["changed"] == 2
    finally:
        event.remove(Session, "after_flush", meanwhile)
    recounts[0].join(30)
    figures = summary(owner)
    assert (figures["active"], figures["pending"]) == (3, 1)
    results = clients["anonymous"].get(VOTES + "results").get_json()["items"]
    assert [(row["employer"], row["votes"]) for row in results] == [("works", 2), ("mill", 1)]
