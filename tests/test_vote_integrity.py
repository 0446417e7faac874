"""Vote integrity (API.md 8): receipts that confirm or withdraw an employer vote, duplicates
flagged for staff only, the per-address receipt cap, the moderation summary and the public
results, as a client sees them."""

import json
import re
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import event, select, text

from directory_api.models import Employer, Role, Vote, utcnow
from directory_api.platform.extensions import db

from .conftest import (
    PG_URL,
    assert_problem,
    database_rows,
    link_in,
    query_plan,
    queued_mail,
    send_outbox,
    signed_in,
    statements_run,
)
from .factories import grant, make_listing, make_location, make_user, make_vote

VOTES = "/locations/harbour/votes/"
ADDRESS = "val.voter@example.org"


def submission(**changes) -> dict:
    return {
        "yourName": "Val Voter",
        "yourEmail": ADDRESS,
        "yourPhone": "+44 20 7946 0018",
        "businessName": "Harbour Works",
        "businessBranch": "Quay",
        "voteBody": "Fair pay, kind people.",
        "yourPosition": "Clerk",
        **changes,
    }


def submit(client, **changes):
    response = client.post(VOTES + "submit/employer", json=submission(**changes))
    assert response.status_code == 201, response.get_json()
    return response.get_json()["id"]


def receipt_token(address: str = ADDRESS) -> str:
    """The token of the latest receipt queued to `address` (the same in both links)."""
    body = queued_mail(address)[-1].body
    token = link_in(body, "/votes/confirm/")
    assert link_in(body, "/votes/withdraw/") == token
    return token


@pytest.fixture
def harbour(app):
    location = make_location("harbour", name="Harbour Town")
    make_listing("employer", location, "works", name="Harbour Works")
    make_listing("employer", location, "mill", name="Old Mill")
    return location


@pytest.fixture
def staff(app, harbour):
    owner = make_user("owner@example.com")
    grant(owner, harbour, Role.OWNER)
    return signed_in(app, owner.email)


def staff_view(staff, vote_id: str) -> dict:
    response = staff.get(VOTES + f"id/{vote_id}")
    assert response.status_code == 200, response.get_json()
    return response.get_json()


# --- receipts --------------------------------------------------------------------------------


def test_the_receipt_reaches_the_voter_with_both_links(app_factory, smtp_server):
    catcher, port = smtp_server
    app = app_factory(
        MAIL_SERVER="127.0.0.1",
        MAIL_PORT=port,
        MAIL_SUPPRESS_SEND=False,
        FRONTEND_URL="https://directory.example",
    )
    with app.app_context():
        harbour = make_location("harbour", name="Harbour Town")
        make_listing("employer", harbour, "works", name="Harbour Works")
        submit(app.test_client(), yourEmail="Val.Voter@Example.org")
        send_outbox(app)
    (message,) = catcher.messages
    assert message["To"] == "Val.Voter@Example.org"  # as typed
    assert "Harbour Town" in message["Subject"]
    body = message.get_content()
    token = link_in(body, "https://directory.example/votes/confirm/")
    assert link_in(body, "https://directory.example/votes/withdraw/") == token
    assert len(token) >= 22  # ≥ 128 random bits, URL-safe
    assert "Harbour Works" in body and "30 days" in body
    # Only its hash is kept.
    with app.app_context():
        stored = db.session.scalar(select(Vote.receipt_token_hash))
    assert stored and token not in stored


def test_confirm_marks_the_vote_confirmed_once(client, staff):
    vote_id = submit(client)
    assert staff_view(staff, vote_id)["confirmed"] is False
    token = receipt_token()

    response = client.post(f"/votes/confirm/{token}")
    assert response.status_code == 200
    assert response.get_json() == {"status": "confirmed"}
    first = staff_view(staff, vote_id)
    assert first["confirmed"] is True and first["confirmedAt"]

    again = client.post(f"/votes/confirm/{token}")
    assert again.status_code == 200 and again.get_json() == {"status": "confirmed"}
    assert staff_view(staff, vote_id)["confirmedAt"] == first["confirmedAt"]


def test_withdraw_deletes_the_vote_and_voids_the_token(client, staff):
    vote_id = submit(client)
    token = receipt_token()
    response = client.post(f"/votes/withdraw/{token}")
    assert response.status_code == 204 and response.data == b""
    assert db.session.scalar(select(Vote).where(Vote.your_email == ADDRESS)) is None
    assert staff.get(VOTES + f"id/{vote_id}").status_code == 404
    assert_problem(client.post(f"/votes/withdraw/{token}"), 404)
    assert_problem(client.post(f"/votes/confirm/{token}"), 404)


@pytest.mark.parametrize("receipt", ["pending", "delivered"])
def test_withdraw_takes_the_vote_s_receipt_out_of_the_outbox(app, client, staff, receipt):
    """The receipt holds the voter's address: it goes with the vote (API.md 8)."""
    submit(client, yourEmail="kept@example.org")  # another vote, from another address
    submit(client, businessName="Old Mill")  # and another vote from the same address
    standing = receipt_token()
    submit(client)
    token = receipt_token()
    if receipt == "delivered":
        send_outbox(app)
    assert len(queued_mail(ADDRESS)) == 2
    assert client.post(f"/votes/withdraw/{token}").status_code == 204
    db.session.rollback()
    assert len(queued_mail(ADDRESS)) == 1  # the standing vote's receipt alone
    assert len(queued_mail("kept@example.org")) == 1
    assert client.post(f"/votes/confirm/{standing}").status_code == 200
    rows = database_rows()
    assert sum(ADDRESS in row for row in rows["outbox"]) == 1
    assert sum(ADDRESS in row for row in rows["votes"]) == 1  # the standing vote


def test_a_vote_deleted_by_staff_takes_its_receipt_too(client, staff):
    vote_id = submit(client)
    assert len(queued_mail(ADDRESS)) == 1
    assert staff.delete(VOTES, json={"id": vote_id}).status_code == 204
    db.session.rollback()
    assert queued_mail(ADDRESS) == []


@pytest.mark.parametrize("action", ["confirm", "withdraw"])
def test_unknown_and_expired_tokens_are_404(client, harbour, action):
    assert_problem(client.post(f"/votes/{action}/not-a-real-token"), 404)
    submit(client)
    token = receipt_token()
    vote = db.session.scalar(select(Vote))
    vote.receipt_expires_at = utcnow() - timedelta(seconds=1)
    db.session.commit()
    assert_problem(client.post(f"/votes/{action}/{token}"), 404)
    assert db.session.scalar(select(Vote.confirmed)) is False  # nothing changed


# A body names its employer by slug (read with the address's history, in one statement)
# or by name alone (looked up apart): both paths, the same rules.
BY_SLUG_OR_NAME = pytest.mark.parametrize(
    "named", [{"employer": "works"}, {}], ids=["slug", "name"]
)


@BY_SLUG_OR_NAME
def test_receipts_to_one_address_are_capped_but_votes_kept(app_factory, named):
    app = app_factory(VOTE_RECEIPTS_PER_ADDRESS=2)
    with app.app_context():
        harbour = make_location("harbour")
        make_listing("employer", harbour, "works", name="Harbour Works")
        client = app.test_client()
        # One address in three spellings: one allowance.
        for spelling in ("val@example.org", "VAL@example.org", "val@EXAMPLE.org"):
            submit(client, yourEmail=spelling, **named)
        assert db.session.scalar(select(db.func.count()).select_from(Vote)) == 3
        receipts = [m for m in queued_mail() if m.template == "vote_receipt"]
        assert len(receipts) == 2
        # Another address has its own allowance.
        submit(client, yourEmail="other@example.org", **named)
        assert len(queued_mail("other@example.org")) == 1


@BY_SLUG_OR_NAME
def test_while_the_key_is_rotated_an_address_is_known_by_either_hash(app_factory, named):
    """Its vote hashed under the old key is the new one's original and spent its receipt."""
    old, new = "the-old-secret-key-" + "o" * 20, "the-new-secret-key-" + "n" * 20
    before = app_factory(SECRET_KEY=old, VOTE_RECEIPTS_PER_ADDRESS=1)
    with before.app_context():
        harbour = make_location("harbour")
        make_listing("employer", harbour, "works", name="Harbour Works")
        first = submit(before.test_client(), **named)
    after = app_factory(SECRET_KEY=new, SECRET_KEY_FALLBACKS=[old], VOTE_RECEIPTS_PER_ADDRESS=1)
    with after.app_context():
        second = submit(after.test_client(), **named)
        vote = db.session.get(Vote, uuid.UUID(second))
        assert str(vote.duplicate_of_id) == first
        assert vote.receipt_token_hash is None  # the allowance was spent under the old key
        assert len(queued_mail(ADDRESS)) == 1
        # A new address under the new key alone: its own allowance, no original.
        third = db.session.get(
            Vote, uuid.UUID(submit(after.test_client(), yourEmail="x@y.org", **named))
        )
        assert (third.duplicate_of_id, len(queued_mail("x@y.org"))) == (None, 1)


@pytest.mark.parametrize("employer", ["works", None])
def test_a_receipt_quotes_nothing_the_submitter_wrote(client, harbour, employer):
    """Else the form would carry anyone's text into a stranger's mailbox."""
    bait = "URGENT log in at https://evil.example now"
    changes = {"yourName": bait, "voteBody": bait, "businessName": bait, "businessBranch": bait}
    submit(client, **changes, **({"employer": employer} if employer else {}))
    body = queued_mail(ADDRESS)[-1].body
    assert "evil.example" not in body
    assert ("the employer Harbour Works" if employer else "about an employer") in body


def test_receipt_links_share_the_token_endpoints_allowance(app_factory):
    app = app_factory(RATELIMIT_TOKENS_PER_IP="2/hour")
    with app.app_context():
        make_location("harbour")
        client = app.test_client()
        assert client.post("/votes/confirm/unknown-token").status_code == 404
        assert client.post("/votes/withdraw/unknown-token").status_code == 404
        limited = client.post("/votes/confirm/unknown-token")
        assert_problem(limited, 429)
        assert_problem(client.post("/me/password-reset/unknown-token", json={}), 429)


# --- duplicates ------------------------------------------------------------------------------


def test_a_second_vote_for_the_same_employer_is_flagged_for_staff_only(client, staff):
    first = submit(client, employer="works")
    second = client.post(
        VOTES + "submit/employer",
        json=submission(employer="works", yourEmail="VAL.voter@example.org"),
    )
    # The submitter learns nothing: the same answer as any vote.
    assert second.status_code == 201
    assert set(second.get_json()) == {"id", "status"}
    second_id = second.get_json()["id"]
    assert staff_view(staff, second_id)["duplicateOf"] == first
    assert staff_view(staff, first)["duplicateOf"] is None
    # Another employer from the same address is not a duplicate.
    other = submit(client, employer="mill")
    assert staff_view(staff, other)["duplicateOf"] is None
    # The public sees none of it.
    for vote_id in (first, second_id):
        staff.put(VOTES, json={"id": vote_id, "active": True})
    public = client.get(VOTES).get_json()["items"]
    assert len(public) == 2
    for item in public:
        assert not {"duplicateOf", "confirmed", "confirmedAt"} & set(item)


def test_without_an_employer_the_business_name_decides(client, staff):
    first = submit(client, businessName="Corner Shop")
    same = submit(client, businessName="CORNER SHOP")
    other = submit(client, businessName="Another Shop")
    assert staff_view(staff, same)["duplicateOf"] == first
    assert staff_view(staff, other)["duplicateOf"] is None


def test_withdrawing_the_original_promotes_the_next_vote(client, staff):
    first = submit(client, employer="works")
    first_token = receipt_token()
    second = submit(client, employer="works")
    third = submit(client, employer="works")
    assert client.post(f"/votes/withdraw/{first_token}").status_code == 204
    assert staff_view(staff, second)["duplicateOf"] is None
    assert staff_view(staff, third)["duplicateOf"] == second
    assert staff.get(VOTES + f"id/{first}").status_code == 404


def test_staff_filter_by_confirmation_and_duplicates_the_public_cannot(client, staff):
    first = submit(client, employer="works")
    client.post(f"/votes/confirm/{receipt_token()}")
    second = submit(client, employer="works")
    for vote_id in (first, second):
        staff.put(VOTES, json={"id": vote_id, "active": True})

    def ids(user_client, query):
        response = user_client.get(VOTES + query)
        assert response.status_code == 200, response.get_json()
        return {item["id"] for item in response.get_json()["items"]}

    assert ids(staff, "?confirmed=true") == {first}
    assert ids(staff, "?confirmed=false") == {second}
    assert ids(staff, "?duplicate=true") == {second}
    assert ids(staff, "?duplicate=false") == {first}
    # For the public these filters change nothing: it sees neither confirmation nor duplicates.
    assert ids(client, "?confirmed=true") == ids(client, "?duplicate=true") == {first, second}


def test_activation_of_unconfirmed_votes_can_be_required(app_factory):
    app = app_factory(VOTE_REQUIRE_CONFIRMATION=True)
    with app.app_context():
        harbour = make_location("harbour")
        make_listing("employer", harbour, "works", name="Harbour Works")
        owner = make_user("owner@example.com")
        grant(owner, harbour, Role.OWNER)
        client, staff = app.test_client(), signed_in(app, owner.email)
        vote_id = submit(client)
        refused = staff.put(VOTES, json={"id": vote_id, "active": True})
        assert "not confirmed" in assert_problem(refused, 409)["detail"]
        assert staff_view(staff, vote_id)["active"] is False
        # Other moderation stays possible; a confirmed vote may be activated.
        assert staff.put(VOTES, json={"id": vote_id, "businessBranch": "Dock"}).status_code == 200
        assert client.post(f"/votes/confirm/{receipt_token()}").status_code == 200
        assert staff.put(VOTES, json={"id": vote_id, "active": True}).status_code == 200


def test_without_the_setting_unconfirmed_votes_may_be_activated(client, staff):
    vote_id = submit(client)
    response = staff.put(VOTES, json={"id": vote_id, "active": True})
    assert response.status_code == 200 and response.get_json()["confirmed"] is False


def test_an_active_duplicate_entered_by_staff_counts_once(client, staff):
    for _ in range(2):
        response = staff.post(VOTES, json={**submission(), "employer": "works", "active": True})
        assert response.status_code == 201
    assert response.get_json()["duplicateOf"] is not None
    assert results(client)["items"] == [{"employer": "works", "name": "Harbour Works", "votes": 1}]


def test_moderation_leaves_the_employer_unchanged(client, staff):
    before = client.get("/locations/harbour/employers/slug/works").get_json()["updatedAt"]
    vote_id = submit(client, employer="works")
    staff.put(VOTES, json={"id": vote_id, "active": True})
    assert results(client)["items"][0]["votes"] == 1
    after = client.get("/locations/harbour/employers/slug/works").get_json()["updatedAt"]
    assert after == before


def test_votes_entered_by_staff_are_confirmed_and_get_no_receipt(client, staff):
    response = staff.post(VOTES, json={**submission(), "employer": "works"})
    assert response.status_code == 201
    assert response.get_json()["confirmed"] is True and response.get_json()["confirmedAt"]
    assert queued_mail(ADDRESS) == []


# --- summary ---------------------------------------------------------------------------------


def seed_votes(harbour) -> None:
    """works: 2 active (1 confirmed, answered) + 1 pending duplicate; mill: 1 pending; 1
    without one, held as suspect."""
    works, mill = (
        db.session.scalar(select(Employer).where(Employer.slug == slug))
        for slug in ("works", "mill")
    )
    a = make_vote(
        harbour,
        employer_id=works.id,
        active=True,
        confirmed=True,
        your_email="a@x.org",
        reply_body="Thank you.",
        reply_created_at=utcnow(),
        reply_updated_at=utcnow(),
    )
    make_vote(harbour, employer_id=works.id, active=True, your_email="b@x.org")
    make_vote(harbour, employer_id=works.id, duplicate_of_id=a.id, your_email="a@x.org")
    make_vote(harbour, employer_id=mill.id, your_email="c@x.org")
    make_vote(harbour, business_name="Nobody's", your_email="d@x.org", suspect=True)


def test_summary_counts_the_queue(client, staff, harbour):
    seed_votes(harbour)
    response = staff.get(VOTES + "summary")
    assert response.status_code == 200
    assert response.get_json() == {
        "pending": 3,
        "unconfirmed": 4,
        "duplicates": 1,
        "active": 2,
        "unanswered": 1,
        "suspect": 1,
        "employers": [
            {"employer": "works", "name": "Harbour Works", "active": 2, "pending": 1},
            {"employer": "mill", "name": "Old Mill", "active": 0, "pending": 1},
        ],
    }


def test_summary_lists_employers_in_the_order_of_their_list_by_name(client, staff, harbour):
    for slug, name in (("works-b", "Harbour Works"), ("works-a", "Harbour Works"), ("z", "A")):
        employer = make_listing("employer", harbour, slug, name=name)
        make_vote(harbour, employer_id=employer.id, your_email=f"{slug}@x.org")
    listed = staff.get(VOTES + "summary").get_json()["employers"]
    by_name = client.get("/locations/harbour/employers/?sort=name").get_json()["items"]
    with_votes = [item["slug"] for item in by_name if item["slug"] in {"works-a", "works-b", "z"}]
    assert [row["employer"] for row in listed] == with_votes
    assert with_votes[0] == "z"


def test_summary_of_a_location_without_votes(staff):
    assert staff.get(VOTES + "summary").get_json() == {
        "pending": 0,
        "unconfirmed": 0,
        "duplicates": 0,
        "active": 0,
        "unanswered": 0,
        "suspect": 0,
        "employers": [],
    }


def test_summary_costs_the_same_queries_whatever_the_votes(app, staff, harbour):
    counts = []
    for batch in (1, 40):
        for number in range(batch):
            make_vote(harbour, your_email=f"v{batch}-{number}@x.org")
        with statements_run() as run:
            assert staff.get(VOTES + "summary").status_code == 200
        counts.append(len([executed for executed in run if "votes" in executed.sql]))
    assert counts[0] == counts[1] <= 2


def test_the_stored_counts_follow_every_change_as_a_recount_finds_them(app, client, staff):
    first = submit(client, employer="works")
    duplicate = submit(client, employer="works")
    other = submit(client, employer="mill", yourEmail="other@example.org")
    client.post("/votes/confirm/" + receipt_token("other@example.org"))
    for change in (
        {"id": first, "active": True},
        {"id": other, "employer": "works", "active": True},
        {"id": duplicate, "active": True},
    ):
        assert staff.put(VOTES, json=change).status_code == 200
    assert staff.put(VOTES + f"id/{first}/reply", json={"body": "Thanks."}).status_code == 201
    assert staff.put(VOTES + f"id/{other}/reply", json={"body": "Thank you."}).status_code == 201
    assert staff.delete(VOTES + f"id/{other}/reply").status_code == 204
    assert staff.delete(VOTES, json={"id": first}).status_code == 204  # its duplicate counts
    kept = staff.get(VOTES + "summary").get_json()
    assert kept == {
        "pending": 0,
        "active": 2,
        "unconfirmed": 1,
        "duplicates": 0,
        "unanswered": 2,
        "suspect": 0,
        "employers": [{"employer": "works", "name": "Harbour Works", "active": 2, "pending": 0}],
    }
    assert results(client)["items"] == [{"employer": "works", "name": "Harbour Works", "votes": 2}]
    result = app.test_cli_runner().invoke(args=["listings", "recount"])
    assert result.exit_code == 0, result.output
    assert staff.get(VOTES + "summary").get_json() == kept


# --- results ---------------------------------------------------------------------------------


def results(client, query: str = "") -> dict:
    response = client.get(VOTES + "results" + query)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_results_count_active_non_duplicate_votes_per_employer(client, staff, harbour):
    seed_votes(harbour)
    page = results(client)
    assert page["items"] == [{"employer": "works", "name": "Harbour Works", "votes": 2}]
    assert page["total"] == 1


def test_results_follow_moderation_as_it_happens(client, staff, harbour):
    first = submit(client, employer="mill")
    second = submit(client, employer="mill", yourEmail="other@example.org")
    duplicate = submit(client, employer="mill")
    assert results(client)["items"] == []
    for vote_id in (first, second, duplicate):
        staff.put(VOTES, json={"id": vote_id, "active": True})
    assert results(client)["items"] == [{"employer": "mill", "name": "Old Mill", "votes": 2}]
    # Linked to another employer: it moves.
    staff.put(VOTES, json={"id": second, "employer": "works"})
    counts = {item["employer"]: item["votes"] for item in results(client)["items"]}
    assert counts == {"mill": 1, "works": 1}
    # The original deleted: its duplicate takes its place and counts.
    assert staff.delete(VOTES, json={"id": first}).status_code == 204
    counts = {item["employer"]: item["votes"] for item in results(client)["items"]}
    assert counts == {"mill": 1, "works": 1}
    staff.put(VOTES, json={"id": duplicate, "active": False})
    assert [item["employer"] for item in results(client)["items"]] == ["works"]


def test_results_are_sorted_and_paged(client, harbour):
    employers = []
    for number, votes in enumerate((3, 1, 3, 2)):
        employer = make_listing("employer", harbour, f"e{number}", name=f"Employer {number}")
        employers.append(employer)
        for vote in range(votes):
            make_vote(
                harbour, employer_id=employer.id, active=True, your_email=f"{number}-{vote}@x.org"
            )
    page = results(client, "?perPage=2")
    assert [i["employer"] for i in page["items"]] == ["e0", "e2"]  # -votes, then name
    assert (
        page["total"] == 4
        and 'rel="next"' in client.get(VOTES + "results?perPage=2").headers["Link"]
    )
    assert [i["employer"] for i in results(client, "?perPage=2&page=2")["items"]] == ["e3", "e1"]
    assert [i["employer"] for i in results(client, "?sort=name")["items"]] == [
        "e0",
        "e1",
        "e2",
        "e3",
    ]
    assert [i["employer"] for i in results(client, "?sort=votes,-name")["items"]] == [
        "e1",
        "e3",
        "e2",
        "e0",
    ]
    assert "sort" in assert_problem(client.get(VOTES + "results?sort=yourEmail"), 422)["errors"]


def test_public_answers_never_carry_personal_data(client, staff, harbour):
    vote_id = submit(client, employer="works")
    staff.put(VOTES, json={"id": vote_id, "active": True})
    for path in ("results", "", f"id/{vote_id}"):
        response = client.get(VOTES + path)
        assert response.status_code == 200
        text_ = response.get_data(as_text=True)
        assert ADDRESS not in text_ and "7946" not in text_


def test_erasing_an_original_counts_the_votes_it_held_back(app, client, staff, harbour):
    """A duplicate whose address staff corrected stays when the original's address is
    erased; released, it counts."""
    first = submit(client, employer="mill")
    second = submit(client, employer="mill")
    staff.put(VOTES, json={"id": second, "yourEmail": "corrected@example.org", "active": True})
    assert results(client)["items"] == []  # still flagged as the first one's duplicate
    result = app.test_cli_runner().invoke(args=["privacy", "erase", ADDRESS, "--yes"])
    assert result.exit_code == 0, result.output
    assert staff.get(VOTES + f"id/{first}").status_code == 404
    assert results(client)["items"] == [{"employer": "mill", "name": "Old Mill", "votes": 1}]


def test_erasure_keeps_the_results_right(app, client, staff, harbour):
    vote_id = submit(client, employer="works")
    staff.put(VOTES, json={"id": vote_id, "active": True})
    assert results(client)["total"] == 1
    result = app.test_cli_runner().invoke(args=["privacy", "erase", ADDRESS, "--yes"])
    assert result.exit_code == 0, result.output
    assert results(client)["items"] == []


def test_retention_clears_expired_receipt_tokens_and_keeps_the_vote(app, client, harbour):
    submit(client)
    vote = db.session.scalar(select(Vote))
    vote.notice_token_hash = "0" * 64  # the withdraw link a reply's notice carried
    vote.receipt_expires_at = utcnow() - timedelta(minutes=1)
    db.session.commit()
    result = app.test_cli_runner().invoke(args=["retention", "run"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["tokensDeleted"] == 1
    db.session.rollback()
    kept = select(Vote.receipt_token_hash, Vote.notice_token_hash, Vote.business_name)
    assert db.session.execute(kept).one() == (None, None, "Harbour Works")


def test_votes_loaded_outside_the_app_are_counted_after_a_recount(app, client, harbour):
    works = db.session.scalar(select(Employer).where(Employer.slug == "works"))
    db.session.execute(
        Vote.__table__.insert().values(
            id=uuid.uuid4(),
            location_id=harbour.id,
            type="employer",
            active=True,
            confirmed=False,
            employer_id=works.id,
            business_name="Harbour Works",
            vote_body="Good",
            created_at=utcnow(),
            updated_at=utcnow(),
        )
    )
    db.session.commit()
    assert results(client)["items"] == []  # a bulk load passes by the stored counts
    result = app.test_cli_runner().invoke(args=["listings", "recount"])
    assert result.exit_code == 0, result.output
    assert results(client)["items"] == [{"employer": "works", "name": "Harbour Works", "votes": 1}]


@pytest.mark.skipif(
    not PG_URL, reason="the plan is PostgreSQL's; CI runs this in its PostgreSQL pass"
)
def test_results_at_100k_votes_read_counts_not_votes(app, client, harbour):
    works = db.session.scalar(select(Employer).where(Employer.slug == "works"))
    from directory_api.platform.timeouts import unbounded
    from directory_api.vote_integrity import recount_votes

    # Setting up 100k votes may take longer than the app's statement timeout (and the
    # client's wait after it) on a busy machine; the timeout is not what this test is about.
    with unbounded(db.session.connection()):
        db.session.execute(
            text(
                "INSERT INTO votes (id, location_id, type, active, employer_id, business_name,"
                " vote_body, confirmed, created_at, updated_at)"
                " SELECT gen_random_uuid(), :location, 'employer', true, :employer,"
                " 'Harbour Works', 'Good', false, now(), now() FROM generate_series(1, 100000)"
            ),
            {"location": harbour.id, "employer": works.id},
        )
    db.session.commit()
    with unbounded(db.session.connection()):
        recount_votes([works.id])  # a bulk insert passes by the ORM's upkeep
    db.session.commit()
    db.session.execute(text("ANALYZE votes"))
    db.session.execute(text("ANALYZE listings"))
    db.session.commit()
    with statements_run() as run:
        page = results(client)
    captured = [executed for executed in run if "vote_count" in executed.sql]
    assert page["items"] == [{"employer": "works", "name": "Harbour Works", "votes": 100000}]
    for statement, parameters in captured:
        assert not re.search(r"\b(FROM|JOIN)\s+votes\b", statement, re.IGNORECASE), statement
        with db.engine.connect() as connection:
            plan = connection.exec_driver_sql("EXPLAIN " + statement, parameters).scalars().all()
        assert not any("votes" in line for line in plan), "\n".join(plan)


@pytest.mark.skipif(bool(PG_URL), reason="the SQLite path of migration 0011 (CI covers PostgreSQL)")
def test_migration_0011_downgrades_and_upgrades_with_data(tmp_path):
    """On a database of its own: the counts are filled from existing votes, and going back
    keeps every listing (and the search triggers that depend on the table)."""
    from flask_migrate import downgrade, upgrade

    from directory_api import create_app

    app = create_app(
        "testing",
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'old.sqlite3'}",
        SESSION_FILE_DIR=str(tmp_path / "sessions"),
    )
    with app.app_context():
        upgrade()
        location = make_location("harbour")
        works = make_listing("employer", location, "works", name="Harbour Works")
        make_vote(location, employer_id=works.id, active=True)
        make_vote(location, employer_id=works.id, active=False, your_email="b@x.org")
        db.session.remove()

        downgrade(revision="0010")
        with db.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT count(*) FROM listings").scalar() == 1
            triggers = connection.exec_driver_sql(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"
            ).scalar()
        assert triggers > 0
        upgrade()
        with db.engine.connect() as connection:
            counted = connection.exec_driver_sql("SELECT vote_count FROM listings").scalar()
        assert counted == 1  # the active vote; the pending one waits for moderation
        db.session.remove()
        db.engine.dispose()


def test_an_address_with_many_votes_costs_a_new_vote_one_earlier_row(client, staff, harbour):
    first = submit(client, employer="works")
    mill = db.session.scalar(select(Employer).where(Employer.slug == "mill"))
    for _ in range(150):  # an address that votes again and again, for another employer
        make_vote(harbour, your_email=ADDRESS, business_name="Old Mill", employer_id=mill.id)
    loaded: list[uuid.UUID] = []

    def counted(vote, _context) -> None:
        loaded.append(vote.id)

    event.listen(Vote, "load", counted)
    try:
        with statements_run() as run:
            second = submit(client, employer="works")
    finally:
        event.remove(Vote, "load", counted)

    assert loaded == []  # no vote is loaded as an object: the earliest one's id is enough
    [duplicate_check] = [
        executed.sql
        for executed in run
        if executed.sql.startswith("SELECT")
        and "email_hash" in executed.sql
        and "employer_id" in executed.sql
    ]
    assert "LIMIT" in duplicate_check.upper()
    assert staff_view(staff, second)["duplicateOf"] == first


def copies_of(vote: Vote, changes) -> list[dict]:
    """Rows of `vote`'s columns, one for each dict of `changes` (what differs), each with
    an id of its own and no token: thousands of votes in one INSERT."""
    columns = {column.key: getattr(vote, column.key) for column in Vote.__table__.columns}
    tokens = {"receipt_token_hash": None, "notice_token_hash": None}
    return [columns | tokens | {"id": uuid.uuid4()} | change for change in changes]


def vacuumed_votes() -> None:
    """The votes table as autovacuum leaves it on PostgreSQL: its statistics, and its
    pages' visibility (which lets an index alone answer)."""
    if db.engine.dialect.name != "sqlite":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as vacuum:
            vacuum.exec_driver_sql("VACUUM ANALYZE votes")


def test_an_address_s_earliest_vote_for_an_employer_is_read_from_one_index(app, client, harbour):
    """An address with thousands of votes for one employer: its next vote's original is
    the first entry of the address-and-employer index (migration 0026), not all of them
    read and sorted (PostgreSQL combined the address's index and the employer's: 6 ms of
    its time a vote at 6,775 of them)."""
    works = db.session.scalar(select(Employer).where(Employer.slug == "works"))
    first = make_vote(harbour, employer_id=works.id, your_email=ADDRESS)
    copies = copies_of(
        first, ({"created_at": first.created_at + timedelta(microseconds=n)} for n in range(1, 501))
    )
    # And, before them all, other addresses' votes at the location: walking its votes in
    # order of creation would meet those first.
    mill = db.session.scalar(select(Employer).where(Employer.slug == "mill"))
    others = copies_of(
        first,
        (
            {
                "created_at": first.created_at - timedelta(microseconds=n),
                "email_hash": uuid.uuid4().hex * 2,
                "employer_id": (works if n % 2 else mill).id,
            }
            for n in range(1, 10001)
        ),
    )
    db.session.execute(Vote.__table__.insert(), copies + others)
    db.session.commit()
    vacuumed_votes()

    with statements_run() as run:
        new_id = submit(client, employer="works")
    [(statement, parameters)] = [
        (executed.sql, executed.parameters)
        for executed in run
        if "ORDER BY votes.employer_id, votes.created_at" in executed.sql
        and "FROM listings" in executed.sql
    ]
    assert db.session.get(Vote, uuid.UUID(new_id)).duplicate_of_id == first.id
    plan = query_plan(statement, parameters)
    assert "ix_votes_email_hash_employer_created" in plan, plan
    assert "TEMP B-TREE" not in plan and " Sort " not in plan, plan  # no sort of them


def test_a_flooding_address_s_next_vote_reads_its_own_entries(app, client, harbour):
    """The receipt allowance counts the address's receipts of the last 24 hours from an
    index of receipts alone, by address and time (migration 0027): its few entries. On the
    index of all the address's votes by time, SQLite read every vote the address made that
    day (3,000 here), and PostgreSQL, expecting an address that holds half of the votes to
    show its receipts among the first rows of any scan, read the table under the LIMIT
    (all of it: the address has none). On this data, EXPLAIN ANALYZE: 1.2 ms of
    PostgreSQL's time walking the day's votes, 0.01-0.03 ms on the index.

    And its earliest vote for the employer it now names, for which it has none, is the
    first entry of 0026's index (none there), not looked for by walking the location's
    votes by time, PostgreSQL's plan under the same misjudgement while the statement's
    order was by time alone: 3 ms here, every vote of the location read."""
    works = db.session.scalar(select(Employer).where(Employer.slug == "works"))
    first = make_vote(harbour, employer_id=works.id, your_email=ADDRESS)
    now = utcnow()
    # The address floods: 3,000 votes today, none with a receipt (its allowance was used).
    flood = copies_of(first, ({"created_at": now - timedelta(seconds=n)} for n in range(1, 3001)))
    # Other addresses: 3,000 receipts today, one each.
    others = copies_of(
        first,
        (
            {
                "created_at": now - timedelta(seconds=n),
                "email_hash": uuid.uuid4().hex * 2,
                "receipt_token_hash": uuid.uuid4().hex * 2,
            }
            for n in range(1, 3001)
        ),
    )
    db.session.execute(Vote.__table__.insert(), flood + others)
    db.session.commit()
    vacuumed_votes()

    with statements_run() as run:
        new_id = submit(client, employer="mill")  # the flood was for `works`
    [(statement, parameters)] = [
        (executed.sql, executed.parameters)
        for executed in run
        if "receipt_token_hash IS NOT NULL" in executed.sql and "FROM listings" in executed.sql
    ]
    assert len(queued_mail(ADDRESS)) == 1  # its receipt: the address had none today
    assert db.session.get(Vote, uuid.UUID(new_id)).duplicate_of_id is None
    plan = query_plan(statement, parameters)
    assert "ix_votes_email_hash_receipts" in plan, plan
    assert "ix_votes_email_hash_employer_created" in plan, plan
    for by_time in ("ix_votes_location_created", "ix_votes_created_at", "ix_votes_unredacted"):
        assert by_time not in plan, plan
