"""Public replies to votes (API.md 15): one per vote, written by the location's staff,
shown to everyone who may see the vote, with its author for staff only.

Who may write or delete one is the role matrix's; here is what a reply does.
"""

import csv
import io
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from directory_api.models import Vote, utcnow
from directory_api.platform.extensions import db

from .conftest import assert_problem, link_in, queued_mail
from .factories import make_vote

VOTES = "/locations/harbour/votes/"
THANKS = "Thank you, Val.\nWe are glad you like working here."
REPLY_KEYS = {"body", "createdAt", "updatedAt"}


def stored_reply(vote_id: str) -> str | None:
    return db.session.scalar(select(Vote.reply_body).where(Vote.id == uuid.UUID(vote_id)))


def reply_path(vote_id: str, location: str = "harbour") -> str:
    return f"/locations/{location}/votes/id/{vote_id}/reply"


@pytest.fixture
def votes(world) -> dict[str, str]:
    """Harbour: an active and an inactive vote of Val's; hill: an active one."""

    def vote(location, active: bool) -> str:
        made = make_vote(
            location,
            active=active,
            your_email="val.voter@example.org",
            your_phone="+44 20 7946 0018",
            your_position="Clerk",
        )
        return str(made.id)

    return {
        "shown": vote(world["harbour"], True),
        "hidden": vote(world["harbour"], False),
        "hill": vote(world["hill"], True),
    }


def test_the_first_reply_is_created_and_a_second_replaces_its_text(clients, world, votes):
    created = clients["admin"].put(reply_path(votes["shown"]), json={"body": THANKS})
    assert created.status_code == 201, created.get_json()
    reply = created.get_json()
    assert reply["body"] == THANKS
    assert reply["createdAt"] == reply["updatedAt"]
    assert reply["author"] == {"id": str(world["admin"].id), "email": "admin@example.com"}

    replaced = clients["owner"].put(reply_path(votes["shown"]), json={"body": " Thanks! "})
    assert replaced.status_code == 200, replaced.get_json()
    again = replaced.get_json()
    assert again["body"] == "Thanks!"
    assert again["createdAt"] == reply["createdAt"]
    assert again["updatedAt"] >= reply["updatedAt"]
    # The author is whoever wrote the text shown.
    assert again["author"] == {"id": str(world["owner"].id), "email": "owner@example.com"}
    assert clients["owner"].get(VOTES + f"id/{votes['shown']}").get_json()["reply"] == again


def test_the_same_text_again_is_200_and_changes_nothing(clients, votes):
    first = clients["admin"].put(reply_path(votes["shown"]), json={"body": THANKS}).get_json()
    same = clients["owner"].put(reply_path(votes["shown"]), json={"body": THANKS})
    assert same.status_code == 200
    assert same.get_json() == first


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Missing data for required field."),
        ({"body": ""}, "Missing data for required field."),
        ({"body": "   "}, "Missing data for required field."),
        ({"body": None}, "Field may not be null."),
        ({"body": "x" * 2001}, "Longer than 2000 characters."),
        ({"body": 5}, "Not a valid string."),
    ],
)
def test_an_invalid_body_is_422_and_stores_nothing(clients, votes, body, message):
    response = clients["admin"].put(reply_path(votes["shown"]), json=body)
    problem = assert_problem(response, 422)
    assert problem["errors"] == {"body": [message]}
    assert stored_reply(votes["shown"]) is None


def test_a_reply_may_span_2000_characters_and_lines(clients, votes):
    body = ("Thank you.\n" * 200)[:2000]
    response = clients["admin"].put(reply_path(votes["shown"]), json={"body": body})
    assert response.status_code == 201, response.get_json()
    assert len(response.get_json()["body"]) == 2000


@pytest.mark.parametrize(
    "body",
    [
        "Write to VAL.Voter@Example.org for details.",
        "Call Val on 020 7946 0018.",
        "Her number: 7946-0018",
        "+44 (20) 79460018",
    ],
)
def test_a_reply_quoting_the_voters_address_or_phone_is_422(clients, votes, body):
    """No doxxing by reply: the address in any case, the phone by its last 8 digits."""
    clients["admin"].put(reply_path(votes["shown"]), json={"body": THANKS})
    response = clients["admin"].put(reply_path(votes["shown"]), json={"body": body})
    problem = assert_problem(response, 422)
    assert list(problem["errors"]) == ["body"]
    assert stored_reply(votes["shown"]) == THANKS


def test_other_digits_and_addresses_are_fine(clients, votes):
    body = "Call us on 020 7946 0999 or write to jobs@harbour.example."
    response = clients["admin"].put(reply_path(votes["shown"]), json={"body": body})
    assert response.status_code == 201, response.get_json()


def test_a_vote_of_another_location_or_none_is_404(clients, votes):
    for vote_id in (votes["hill"], "00000000-0000-4000-8000-000000000000"):
        assert_problem(clients["admin"].put(reply_path(vote_id), json={"body": THANKS}), 404)
        assert_problem(clients["admin"].delete(reply_path(vote_id)), 404)
    assert stored_reply(votes["hill"]) is None


def test_deleting_the_reply_leaves_the_vote_without_one(clients, votes):
    clients["admin"].put(reply_path(votes["shown"]), json={"body": THANKS})
    assert clients["owner"].delete(reply_path(votes["shown"])).status_code == 204
    assert clients["owner"].get(VOTES + f"id/{votes['shown']}").get_json()["reply"] is None
    assert_problem(clients["owner"].delete(reply_path(votes["shown"])), 404)
    again = clients["admin"].put(reply_path(votes["shown"]), json={"body": "Anew."})
    assert again.status_code == 201  # the first reply again


def test_the_public_sees_replies_on_active_votes_without_their_author(clients, votes):
    for vote in ("shown", "hidden"):
        clients["admin"].put(reply_path(votes[vote]), json={"body": f"About {vote}."})
    public = clients["anonymous"]
    [listed] = public.get(VOTES).get_json()["items"]
    assert listed["id"] == votes["shown"]
    assert set(listed["reply"]) == REPLY_KEYS
    assert listed["reply"]["body"] == "About shown."
    one = public.get(VOTES + f"id/{votes['shown']}").get_json()
    assert one["reply"] == listed["reply"]
    # The inactive vote and its reply exist only for staff.
    assert_problem(public.get(VOTES + f"id/{votes['hidden']}"), 404)
    assert "About hidden." not in public.get(VOTES, query_string={"active": "false"}).text
    # Signed in without access to harbour: the public view.
    other = clients["other_owner"].get(VOTES).get_json()["items"]
    assert set(other[0]["reply"]) == REPLY_KEYS
    staff = {v["id"]: v["reply"] for v in clients["admin"].get(VOTES).get_json()["items"]}
    assert set(staff[votes["hidden"]]) == REPLY_KEYS | {"author"}
    assert staff[votes["hidden"]]["body"] == "About hidden."


def test_a_vote_without_a_reply_shows_null(clients, votes):
    assert clients["anonymous"].get(VOTES).get_json()["items"][0]["reply"] is None
    assert clients["admin"].get(VOTES + f"id/{votes['hidden']}").get_json()["reply"] is None


def test_staff_filter_by_replied(clients, votes):
    clients["admin"].put(reply_path(votes["hidden"]), json={"body": THANKS})

    def listed(who: str, replied: str) -> list[str]:
        response = clients[who].get(VOTES, query_string={"replied": replied})
        assert response.status_code == 200, response.get_json()
        return [vote["id"] for vote in response.get_json()["items"]]

    assert listed("admin", "true") == [votes["hidden"]]
    assert listed("admin", "false") == [votes["shown"]]
    # The public sees no moderation: the filter changes nothing for them.
    assert listed("anonymous", "true") == listed("anonymous", "false") == [votes["shown"]]
    assert_problem(clients["admin"].get(VOTES, query_string={"replied": "maybe"}), 422)


def test_the_summary_counts_active_votes_without_a_reply(clients, votes):
    def unanswered() -> int:
        return clients["owner"].get(VOTES + "summary").get_json()["unanswered"]

    assert unanswered() == 1
    clients["admin"].put(reply_path(votes["hidden"]), json={"body": THANKS})
    assert unanswered() == 1  # inactive votes are not waiting for an answer in public
    clients["admin"].put(reply_path(votes["shown"]), json={"body": THANKS})
    assert unanswered() == 0
    clients["admin"].delete(reply_path(votes["shown"]))
    assert unanswered() == 1


def test_the_export_has_the_replys_text_in_a_column_of_its_own(clients, votes):
    clients["admin"].put(reply_path(votes["shown"]), json={"body": "=Thanks"})
    response = clients["owner"].get(VOTES + "export.csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert "reply" not in rows[0]
    bodies = {row["id"]: row["replyBody"] for row in rows}
    assert bodies == {votes["shown"]: "'=Thanks", votes["hidden"]: ""}


# --- the notice to the voter ----------------------------------------------------------------
VOTER = "Val.Voter@Example.org"  # as typed; the vote keeps its one spelling
SUBMISSION = {
    "yourName": "Val Voter",
    "yourEmail": VOTER,
    "yourPhone": "+44 20 7946 0018",
    "businessName": "Harbour Works",
    "businessBranch": "Quay",
    "voteBody": "Fair pay.",
    "yourPosition": "Clerk",
}


def submitted(client, *, confirm: bool) -> tuple[str, str]:
    """A vote submitted by the public (confirmed from its receipt if `confirm`): its id and
    its receipt's token."""
    response = client.post(VOTES + "submit/employer", json=SUBMISSION)
    assert response.status_code == 201, response.get_json()
    token = link_in(queued_mail(template="vote_receipt")[-1].body, "/votes/confirm/")
    if confirm:
        assert client.post(f"/votes/confirm/{token}").status_code == 200
    return response.get_json()["id"], token


def notices() -> list:
    return queued_mail(template="vote_reply")


def test_the_first_reply_to_a_confirmed_vote_is_mailed_with_a_withdraw_link(clients, world):
    vote_id, _ = submitted(clients["anonymous"], confirm=True)
    clients["admin"].put(reply_path(vote_id), json={"body": THANKS})
    [notice] = notices()
    assert notice.recipients == ["val.voter@example.org"]
    assert "harbour replied" in notice.subject.lower()
    assert THANKS in notice.body
    assert "admin@example.com" not in notice.body  # the author is the staff's to know
    token = link_in(notice.body, "/votes/withdraw/")
    # Edits send nothing; nor does a reply after the first was deleted.
    clients["admin"].put(reply_path(vote_id), json={"body": "Thanks again."})
    clients["admin"].delete(reply_path(vote_id))
    clients["admin"].put(reply_path(vote_id), json={"body": "Thanks once more."})
    assert len(notices()) == 1
    # The link withdraws the vote, which takes its reply and the messages about it along.
    assert clients["anonymous"].post(f"/votes/withdraw/{token}").status_code == 204
    assert_problem(clients["admin"].get(VOTES + f"id/{vote_id}"), 404)
    assert notices() == []


def test_the_receipts_links_stay_valid_after_the_notice(clients, world):
    vote_id, receipt = submitted(clients["anonymous"], confirm=True)
    clients["admin"].put(reply_path(vote_id), json={"body": THANKS})
    assert len(notices()) == 1
    assert clients["anonymous"].post(f"/votes/withdraw/{receipt}").status_code == 204
    assert stored_reply(vote_id) is None


def test_no_notice_to_an_unconfirmed_or_redacted_voter(clients, world):
    unconfirmed, _ = submitted(clients["anonymous"], confirm=False)
    clients["admin"].put(reply_path(unconfirmed), json={"body": THANKS})
    redacted = make_vote(world["harbour"], confirmed=True, your_email=None, your_phone=None)
    response = clients["admin"].put(reply_path(str(redacted.id)), json={"body": THANKS})
    assert response.status_code == 201
    assert notices() == []


def test_a_redacted_vote_keeps_its_reply_and_an_erased_one_takes_it_along(app, clients, votes):
    """API.md 9 treats the reply as part of the vote: retention redacts the voter's details
    and keeps the reply; erasure deletes the vote, and its reply with it."""
    owner = clients["owner"]
    assert owner.put(reply_path(votes["shown"]), json={"body": THANKS}).status_code == 201
    db.session.execute(
        update(Vote)
        .where(Vote.id == uuid.UUID(votes["shown"]))
        .values(created_at=utcnow() - timedelta(days=400))
    )
    db.session.commit()
    result = app.test_cli_runner().invoke(args=["retention", "run"])
    assert result.exit_code == 0, result.output
    redacted = owner.get(VOTES + f"id/{votes['shown']}").get_json()
    assert redacted["redacted"] is True and redacted["yourEmail"] is None
    assert redacted["reply"]["body"] == THANKS
    public = clients["anonymous"].get(VOTES + f"id/{votes['shown']}").get_json()
    assert public["reply"]["body"] == THANKS
    assert owner.get(VOTES + "summary").get_json()["unanswered"] == 0

    result = app.test_cli_runner().invoke(
        args=["privacy", "erase", "val.voter@example.org", "--yes"]
    )
    assert result.exit_code == 0, result.output
    assert owner.get(VOTES + f"id/{votes['shown']}").status_code == 404
    assert db.session.scalar(select(Vote.id).where(Vote.reply_body.is_not(None))) is None
    # The counts follow the erasure (it passes by the ORM): nothing is left at harbour.
    figures = owner.get(VOTES + "summary").get_json()
    assert (figures["active"], figures["pending"], figures["unconfirmed"]) == (0, 0, 0)
