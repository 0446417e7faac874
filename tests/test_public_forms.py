"""Public forms against abuse (API.md 17): the proof-of-work challenge (ALTCHA), its single
use across instances, the time trap with the honeypot that holds a submission, the staff's
held mail, and the per-location cap.

Challenges are solved with `altcha`, the protocol's reference library, as a browser's
widget would; tests/test_browser.py has a real widget solve one.
"""

import base64
import json
import uuid
from datetime import timedelta

import altcha
import pytest
from sqlalchemy import select

from directory_api.models import OutboxMessage, OutboxStatus, Vote
from directory_api.platform.extensions import db
from directory_api.platform.proof_of_work import LIFETIME, create_challenge

from .conftest import (
    assert_problem,
    database_rows,
    queued_mail,
    send_outbox,
    smtp_settings,
)
from .factories import make_location
from .test_votes import body_for

VOTES = "/locations/harbour/votes/"
CHALLENGE = VOTES + "challenge"
ALTCHA_FIELDS = {"algorithm", "challenge", "maxnumber", "salt", "signature"}


def solve(client, path: str = CHALLENGE) -> str:
    """The widget's value for a challenge from `path`: found by trying every number, with
    the reference library, and encoded as the widget sends it."""
    response = client.get(path)
    assert response.status_code == 200, response.get_json()
    challenge = response.get_json()
    found = altcha.solve_challenge_v1(
        challenge["challenge"],
        challenge["salt"],
        challenge["algorithm"],
        challenge["maxnumber"],
    )
    assert found is not None
    return encode({**challenge, "number": found.number})


def encode(solution: dict) -> str:
    fields = {name: solution[name] for name in ("algorithm", "challenge", "salt", "signature")}
    return base64.b64encode(json.dumps({**fields, "number": solution["number"]}).encode()).decode()


def post(client, kind: str = "employer", location: str = "harbour", address=None, **changes):
    """A submission of `kind` with `changes`, from `address` (else the test client's)."""
    return client.post(
        f"/locations/{location}/votes/submit/{kind}",
        json=body_for(kind, **changes),
        environ_base={"REMOTE_ADDR": address or "127.0.0.1"},
    )


@pytest.fixture
def required(app_factory):
    """An app that refuses submissions without a solution, with the default time trap."""
    app = app_factory(VOTE_CHALLENGE="required", RATELIMIT_VOTES_PER_IP="1000/hour")
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        make_location("hill", email="desk@hill.example")
        yield app


# --- the challenge ---------------------------------------------------------------------------


def test_a_challenge_is_public_uncached_and_open_to_every_site(client, world):
    response = client.get(CHALLENGE, headers={"Origin": "https://bakery.example"})
    assert response.status_code == 200
    challenge = response.get_json()
    assert set(challenge) == ALTCHA_FIELDS
    assert challenge["algorithm"] == "SHA-256"
    assert response.headers["Cache-Control"] == "no-store"
    assert "ETag" not in response.headers
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    # The salt carries the location and the expiry, which the signature covers.
    query = challenge["salt"].partition("?")[2]
    assert query.startswith("location=harbour&expires=") and query.endswith("&")
    assert client.get(CHALLENGE).get_json()["challenge"] != challenge["challenge"]
    # The reference library accepts it as its own, with the service's key.
    from directory_api.vote_integrity import challenge_key

    payload = encode({**challenge, "number": solve_number(challenge)})
    assert altcha.verify_solution_v1(payload, challenge_key())[0] is True


def solve_number(challenge: dict) -> int:
    found = altcha.solve_challenge_v1(
        challenge["challenge"], challenge["salt"], "SHA-256", challenge["maxnumber"]
    )
    return found.number


def test_a_challenge_for_no_such_location_is_404(client, world):
    assert_problem(client.get("/locations/nowhere/votes/challenge"), 404)


# --- required --------------------------------------------------------------------------------


def test_required_takes_a_solved_challenge_once(required):
    client = required.test_client()
    solution = solve(client)
    assert post(client, altcha=solution).status_code == 201
    again = post(client, yourEmail="someone.else@example.org", altcha=solution)
    problem = assert_problem(again, 422)
    assert problem["errors"] == {
        "altcha": ["This solution was used already: solve a new challenge."]
    }
    assert db.session.scalar(select(Vote.suspect)) is False


@pytest.mark.parametrize("kind", ["btob", "btoc"])
def test_required_applies_to_every_form_in_json_and_form_bodies(required, kind):
    client = required.test_client()
    assert_problem(post(client, kind), 422)
    form = {**body_for(kind), "altcha": solve(client), "website": ""}
    response = client.post(VOTES + f"submit/{kind}", data=form)
    assert response.status_code == 202, response.get_json()
    assert [message.status for message in queued_mail(template="vote")] == ["pending"]


def bad_solutions(client) -> dict[str, tuple[str, str]]:
    """Solutions that must not pass, each with the words of its refusal."""
    challenge = client.get(CHALLENGE).get_json()
    number = solve_number(challenge)
    good = {**challenge, "number": number}
    other = client.get("/locations/hill/votes/challenge").get_json()
    forged_salt = challenge["salt"].replace("location=harbour", "location=hill")
    invalid = "Not a solution of a challenge of this service."
    malformed = "Not a solution: send the widget's value as it is."
    return {
        "wrong number": (encode({**good, "number": number + 1}), invalid),
        "forged signature": (encode({**good, "signature": "0" * 64}), invalid),
        "salt changed": (encode({**good, "salt": forged_salt}), invalid),
        "SHA-1": (encode({**good, "algorithm": "SHA-1"}), invalid),
        "number as text": (encode({**good, "number": str(number)}), malformed),
        "not base64": ("%%%not-base64%%%", malformed),
        "not JSON": (base64.b64encode(b"[1, 2").decode(), malformed),
        "a list": (base64.b64encode(b"[1, 2]").decode(), malformed),
        "huge": ("A" * 5000, malformed),
        "another location": (
            encode({**other, "number": solve_number(other)}),
            "The challenge was for another location.",
        ),
    }


def test_required_refuses_every_bad_solution_without_echoing_it(required):
    client = required.test_client()
    before = database_rows()
    for name, (payload, words) in bad_solutions(client).items():
        problem = assert_problem(post(client, altcha=payload), 422)
        assert problem["errors"] == {"altcha": [words]}, name
        assert payload not in json.dumps(problem), name
    missing = assert_problem(post(client), 422)
    assert "challenge" in missing["errors"]["altcha"][0]
    assert_problem(post(client, altcha=12), 422)
    assert database_rows() == before


def test_an_expired_challenge_is_refused(required, monkeypatch):
    from directory_api import vote_integrity

    client = required.test_client()
    stale = create_challenge(
        vote_integrity.challenge_key(),
        {"location": "harbour"},
        1_000,
        now=vote_integrity.utcnow() - LIFETIME - timedelta(seconds=1),
    )
    payload = encode({**stale, "number": solve_number(stale)})
    problem = assert_problem(post(client, altcha=payload), 422)
    assert problem["errors"] == {"altcha": ["The challenge expired: solve a new one."]}


def test_a_solution_is_used_once_across_instances(app_factory):
    """Two instances of the service (as two hosts behind one balancer) share the marks:
    Redis when configured, the database otherwise."""
    first, second = (app_factory(VOTE_CHALLENGE="required") for _ in range(2))
    with first.app_context():
        make_location("harbour", email="desk@harbour.example")
        solution = solve(first.test_client())
        assert post(first.test_client(), altcha=solution).status_code == 201
    with second.app_context():
        replay = post(second.test_client(), yourEmail="other@example.org", altcha=solution)
        assert_problem(replay, 422)
        assert db.session.scalar(select(db.func.count()).select_from(Vote)) == 1


def test_a_refused_submission_leaves_its_solution_unused(required):
    """A submission refused for another field may be sent again, corrected, with the same
    solution."""
    client = required.test_client()
    solution = solve(client)
    assert_problem(post(client, altcha=solution, employer="no-such-employer"), 422)
    assert post(client, altcha=solution).status_code == 201


def test_a_submission_that_fails_after_its_check_leaves_its_solution_unused(required, monkeypatch):
    """Checked, then failed before its commit: nothing was kept, so the solution was not
    used (Redis marks are deleted when the transaction ends uncommitted, as rows roll
    back), and the widget's value may be sent again."""
    from directory_api import vote_integrity

    client = required.test_client()
    solution = solve(client)

    def broken(*args, **kwargs):
        raise RuntimeError("the receipt's template broke")

    monkeypatch.setattr(vote_integrity, "send_receipt", broken)
    assert_problem(post(client, altcha=solution), 500)
    monkeypatch.undo()
    assert post(client, altcha=solution).status_code == 201
    assert_problem(post(client, yourEmail="b@example.org", altcha=solution), 422)
    assert db.session.scalar(select(db.func.count()).select_from(Vote)) == 1


# --- log and off -----------------------------------------------------------------------------


def test_log_accepts_what_required_refuses_and_logs_it(app_factory, caplog):
    app = app_factory(VOTE_CHALLENGE="log")
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        client = app.test_client()
        assert post(client).status_code == 201
        assert post(client, yourEmail="b@example.org", altcha="junk").status_code == 201
        solution = solve(client)
        assert post(client, yourEmail="c@example.org", altcha=solution).status_code == 201
        assert post(client, yourEmail="d@example.org", altcha=solution).status_code == 201
    logged = [r.getMessage() for r in caplog.records if "vote challenge (log)" in r.getMessage()]
    assert len(logged) == 3
    assert any("used already" in line for line in logged)
    assert not any("junk" in line for line in logged)


def test_off_asks_nothing_and_holds_nothing(app_factory):
    app = app_factory(VOTE_CHALLENGE="off")
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        response = post(app.test_client(), website="http://spam.example", altcha="junk")
        assert response.status_code == 201
        assert db.session.scalar(select(Vote.suspect)) is False


# --- the time trap and the honeypot ----------------------------------------------------------


def test_fast_with_the_honeypot_filled_is_answered_alike_and_held(required):
    client = required.test_client()
    human = post(client, altcha=solve(client), website="")
    bot = post(client, yourEmail="bot@example.org", altcha=solve(client), website="http://x.test")
    assert human.status_code == bot.status_code == 201
    assert set(human.get_json()) == set(bot.get_json()) == {"id", "status"}
    assert human.get_json()["status"] == bot.get_json()["status"] == "received"
    held = db.session.get(Vote, uuid.UUID(bot.get_json()["id"]))
    assert held.suspect is True
    assert db.session.get(Vote, uuid.UUID(human.get_json()["id"])).suspect is False


def test_the_honeypot_alone_or_speed_alone_holds_nothing(app_factory):
    """A password manager filling the hidden field, or a fast typist: either alone is
    not enough."""
    app = app_factory(VOTE_CHALLENGE="required", VOTE_MIN_FILL_SECONDS=0)
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        client = app.test_client()
        filled = post(client, altcha=solve(client), website="autofilled")
        assert filled.status_code == 201
        assert db.session.scalar(select(Vote.suspect)) is False


def test_staff_see_filter_and_count_suspect_votes(required):
    from directory_api.models import Location, Role

    from .conftest import signed_in
    from .factories import grant, make_user

    client = required.test_client()
    post(client, altcha=solve(client), website="x")
    post(client, yourEmail="human@example.org", altcha=solve(client))
    harbour = db.session.scalar(select(Location).where(Location.slug == "harbour"))
    grant(make_user("owner@example.com"), harbour, Role.OWNER)
    staff = signed_in(required, "owner@example.com")
    suspects = staff.get(VOTES + "?suspect=true").get_json()["items"]
    assert [vote["suspect"] for vote in suspects] == [True]
    assert staff.get(VOTES + "summary").get_json()["suspect"] == 1
    cleared = staff.post(
        VOTES + "bulk", json={"filter": {"suspect": True}, "action": "clearSuspect"}
    )
    assert cleared.get_json()["changed"] == 1
    assert staff.get(VOTES + "summary").get_json()["suspect"] == 0


# --- held mail -------------------------------------------------------------------------------


@pytest.fixture
def held_app(app_factory, smtp_server):
    """Required challenges, mail delivered to a real SMTP server on loopback."""
    catcher, port = smtp_server
    app = app_factory(VOTE_CHALLENGE="required", **smtp_settings(port))
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        yield app, catcher


def held_submission(app, kind: str = "btob") -> None:
    client = app.test_client()
    response = post(client, kind, altcha=solve(client), website="http://x.test")
    assert response.status_code == 202


def staff_of(app):
    from directory_api.models import Location, Role

    from .conftest import signed_in
    from .factories import grant, make_user

    harbour = db.session.scalar(select(Location).where(Location.slug == "harbour"))
    grant(make_user("owner@example.com"), harbour, Role.OWNER)
    return signed_in(app, "owner@example.com")


def test_a_held_business_vote_never_reaches_smtp_until_released(held_app):
    app, catcher = held_app
    held_submission(app)
    send_outbox(app)
    assert catcher.messages == []
    staff = staff_of(app)
    listed = staff.get(VOTES + "held/").get_json()
    assert listed["total"] == 1
    [message] = listed["items"]
    assert set(message) == {"id", "subject", "body", "replyTo", "createdAt"}
    assert message["replyTo"] == body_for("btob")["yourEmail"]
    assert body_for("btob")["voteBody"] in message["body"]
    released = staff.post(VOTES + f"held/id/{message['id']}/release")
    assert released.status_code == 204
    assert staff.get(VOTES + "held/").get_json()["total"] == 0
    send_outbox(app)
    assert [m["To"] for m in catcher.messages] == ["desk@harbour.example"]
    assert_problem(staff.post(VOTES + f"held/id/{message['id']}/release"), 404)
    assert_moderation_audited(staff, "mail.release", message["id"])


def assert_moderation_audited(staff, action: str, message_id: str) -> None:
    """Staff's decision is an audit entry at the location: who, what, which message."""
    [entry] = staff.get(f"/locations/harbour/audit/?action={action}").get_json()["items"]
    assert entry["actor"]["email"] == "owner@example.com"
    assert entry["target"] == {"type": "mail", "id": message_id, "slug": None}
    assert entry["location"] == "harbour"
    assert entry["changes"] == {}


def test_a_discarded_held_vote_is_gone_unsent(held_app):
    app, catcher = held_app
    held_submission(app, "btoc")
    staff = staff_of(app)
    [message] = staff.get(VOTES + "held/").get_json()["items"]
    assert staff.post(VOTES + f"held/id/{message['id']}/discard").status_code == 204
    assert db.session.get(OutboxMessage, uuid.UUID(message["id"])) is None
    send_outbox(app)
    assert catcher.messages == []
    assert_moderation_audited(staff, "mail.discard", message["id"])


def test_held_mail_of_another_location_is_404(held_app):
    app, _ = held_app
    held_submission(app)
    message_id = db.session.scalar(select(OutboxMessage.id))
    hill = make_location("hill", email="desk@hill.example")
    from directory_api.models import Role

    from .conftest import signed_in
    from .factories import grant, make_user

    grant(make_user("hill-owner@example.com"), hill, Role.OWNER)
    other = signed_in(app, "hill-owner@example.com")
    assert other.get("/locations/hill/votes/held/").get_json()["total"] == 0
    assert_problem(other.post(f"/locations/hill/votes/held/id/{message_id}/release"), 404)
    assert db.session.scalar(select(OutboxMessage.status)) == OutboxStatus.HELD


def test_retention_deletes_held_mail_never_released(held_app):
    app, _ = held_app
    held_submission(app)
    message = db.session.scalar(select(OutboxMessage))
    message.created_at = message.created_at - timedelta(days=400)
    db.session.commit()
    result = app.test_cli_runner().invoke(args=["retention", "run"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["messagesDeleted"] == 1


# --- the per-location cap --------------------------------------------------------------------


def test_one_location_takes_at_most_its_cap_from_every_address(app_factory):
    app = app_factory(VOTE_LIMIT_PER_LOCATION="3/hour", VOTE_CHALLENGE="off")
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        make_location("hill", email="desk@hill.example")
        client = app.test_client()
        statuses = [post(client, "btoc", address=f"10.1.0.{n}").status_code for n in range(4)]
        assert statuses == [202, 202, 202, 429]
        limited = post(client, "btoc", address="10.1.0.9")
        assert_problem(limited, 429)
        assert int(limited.headers["Retry-After"]) > 0
        # Another location's form is not affected.
        assert post(client, "btoc", location="hill").status_code == 202


def test_an_address_past_its_own_limit_spends_nothing_of_the_locations(app_factory):
    app = app_factory(
        VOTE_LIMIT_PER_LOCATION="3/hour", RATELIMIT_VOTES_PER_IP="1/hour", VOTE_CHALLENGE="off"
    )
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        client = app.test_client()
        one = [post(client, "btoc").status_code for _ in range(5)]
        assert one == [202, 429, 429, 429, 429]
        others = [post(client, "btoc", address=f"10.2.0.{n}").status_code for n in range(3)]
        assert others == [202, 202, 429]


def test_the_widget_is_served_pinned_and_loadable_from_any_site(client):
    """The ALTCHA widget from the service itself (no CDN): the bytes its ABOUT file pins,
    as a JavaScript module any page may load (a cross-origin module needs CORS)."""
    import hashlib
    from pathlib import Path

    response = client.get("/docs/altcha.min.js", headers={"Origin": "https://bakery.example"})
    assert response.status_code == 200
    assert response.mimetype == "text/javascript"
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    about = Path(__file__).resolve().parent.parent / "directory_api/docs/altcha.min.js.ABOUT"
    pinned = dict(line.split(": ", 1) for line in about.read_text().splitlines())
    assert hashlib.sha256(response.get_data()).hexdigest() == pinned["sha256"]
    assert b"export{" in response.get_data()  # an ES module: <script type="module">


def hostile(payload: bytes) -> str:
    return base64.b64encode(payload).decode()


@pytest.mark.parametrize(
    "payload",
    [
        hostile(b"[" * 1500),  # nested past the JSON parser's depth, within the size cap
        hostile(
            json.dumps(
                {
                    "algorithm": "SHA-256",
                    "challenge": "\ud800",
                    "number": 1,
                    "salt": "a&",
                    "signature": "0" * 64,
                }
            ).encode()
        ),
        hostile(
            json.dumps(
                {
                    "algorithm": "SHA-256",
                    "challenge": "0" * 64,
                    "number": 1,
                    "salt": "a&",
                    "signature": "é" * 64,
                }
            ).encode()
        ),
        hostile(
            json.dumps(
                {
                    "algorithm": "SHA-256",
                    "challenge": "0" * 64,
                    "number": 1,
                    "salt": "\ud800&",
                    "signature": "0" * 64,
                }
            ).encode()
        ),
    ],
)
def test_a_hostile_solution_is_refused_never_a_500(required, payload):
    assert_problem(post(required.test_client(), altcha=payload), 422)


def test_without_redis_the_marks_are_rows_of_the_database(app_factory):
    """The embedded default (and any deployment without REDIS_URL), on this database."""
    app = app_factory(VOTE_CHALLENGE="required", REDIS_URL=None, SESSION_TYPE="cachelib")
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        client = app.test_client()
        solution = solve(client)
        assert post(client, altcha=solution).status_code == 201
        assert_problem(post(client, yourEmail="b@example.org", altcha=solution), 422)
        from directory_api.models import UsedOnce

        assert db.session.scalar(select(db.func.count()).select_from(UsedOnce)) == 1


def test_a_held_employer_vote_mails_no_receipt(required):
    client = required.test_client()
    post(client, yourEmail="victim@example.net", altcha=solve(client), website="x")
    assert queued_mail("victim@example.net") == []
    post(client, yourEmail="person@example.net", altcha=solve(client))
    assert [m.template for m in queued_mail("person@example.net")] == ["vote_receipt"]


def test_held_mail_goes_with_its_location(held_app):
    app, _ = held_app
    held_submission(app)
    from directory_api.models import Location

    from .conftest import signed_in
    from .factories import make_user

    make_user("root@example.com", is_super=True)
    root = signed_in(app, "root@example.com")
    assert root.delete("/locations/slug/harbour").status_code == 204
    assert db.session.scalar(select(OutboxMessage.id)) is None
    assert db.session.scalar(select(Location.id)) is None
