"""/locations/:slug/votes: public submission per type, mail, reading and moderation.

Employer votes are stored inactive until staff of the location activate them; btob and
btoc votes are never stored, only mailed through the outbox to the location (its e-mail,
else its owners, else VOTE_FALLBACK_RECIPIENT). Inactive votes, and the submitter's
e-mail and phone, exist only for those with access to the location (super, owner, admin).
"""

import uuid
from datetime import timedelta

import pytest

from directory_api.models import OutboxStatus, Role, Vote, VoteType, utcnow
from directory_api.platform.extensions import db

from . import factories
from .conftest import PROBLEM, assert_problem, queued_mail, send_outbox, smtp_settings
from .factories import grant, make_listing, make_location, make_user

VOTES = "/locations/harbour/votes/"
TYPES = ["btob", "btoc", "employer"]
MAIL_TYPES = ["btob", "btoc"]
SUCCESS = {"btob": 202, "btoc": 202, "employer": 201}
BASE = {
    "yourName": "Ann Voter",
    "yourEmail": "ann.voter@example.com",
    "yourPhone": "+44 20 7946 0018",
    "businessName": "Acme Ltd",
    "businessBranch": "Harbour Front",
    "voteBody": "Friendly staff — fair prices.\nWould come back.\n\nAnn",
}
EXTRA = {
    "btob": {"yourBusiness": "Bob's Bakery"},
    "btoc": {},
    "employer": {"yourPosition": "Baker"},
}
PERSONAL = ("Ann Voter", "ann.voter@example.com", "7946 0018")
PUBLIC_KEYS = {
    "id",
    "type",
    "active",
    "employer",
    "yourName",
    "businessName",
    "businessBranch",
    "voteBody",
    "yourBusiness",
    "yourPosition",
    "createdAt",
    "updatedAt",
    "reply",
}
# Staff also see whether retention has redacted the submitter (API.md 9).
FULL_KEYS = PUBLIC_KEYS | {
    "yourEmail",
    "yourPhone",
    "redacted",
    "confirmed",
    "confirmedAt",
    "duplicateOf",
    "suspect",
}


def test_the_public_vote_is_an_allow_list():
    """A field added to the staff's VoteOut is not public until it is listed."""
    from marshmallow import fields

    from directory_api.schemas.base import all_but
    from directory_api.schemas.votes import PUBLIC_VOTE_FIELDS, PublicVoteOut, VoteOut

    shown = {field.data_key or name for name, field in PublicVoteOut().dump_fields.items()}
    assert shown == PUBLIC_KEYS

    class WithANewField(VoteOut):
        internal_note = fields.String()

    assert "internal_note" in all_but(WithANewField, PUBLIC_VOTE_FIELDS)
    with pytest.raises(TypeError, match="no field your_adress"):
        all_but(VoteOut, (*PUBLIC_VOTE_FIELDS, "your_adress"))


def body_for(vote_type: str, *, without: tuple[str, ...] = (), **changes) -> dict:
    """A valid submission of `vote_type`, with `changes` applied and `without` left out."""
    body = {**BASE, **EXTRA[vote_type], **changes}
    for field in without:
        body.pop(field)
    return body


def submit(client, vote_type: str, body=None, location: str = "harbour", **kwargs):
    return client.post(
        f"/locations/{location}/votes/submit/{vote_type}",
        json=body_for(vote_type) if body is None else body,
        **kwargs,
    )


def assert_rejected(response, fields: set[str]) -> None:
    """422 problem+json naming exactly `fields`; nothing stored, nothing queued."""
    assert response.status_code == 422, response.get_json()
    assert response.mimetype == PROBLEM
    assert set(response.get_json()["errors"]) == fields
    assert Vote.query.count() == 0
    assert queued_mail() == []


def message_text(message) -> str:
    return message.get_content().replace("\r\n", "\n")


def make_vote(location, number: int, *, days_ago: int, active: bool, employer=None) -> str:
    vote = factories.make_vote(
        location,
        active=active,
        employer=employer,
        your_name=f"Voter Number{number}",
        your_email=f"voter{number}@example.com",
        your_phone=f"+44 100 000 00{number}",
        business_name="Acme Ltd",
        business_branch="Quay",
        vote_body=f"Vote number {number}",
        your_position="Clerk",
        created_at=utcnow() - timedelta(days=days_ago),
    )
    return str(vote.id)


@pytest.fixture
def votes(world):
    """Harbour: two active votes and a newer inactive one; hill: one active vote."""
    acme = make_listing("employer", world["harbour"], "acme", name="Acme Ltd")
    make_listing("employer", world["hill"], "hill-corp", name="Hill Corp")
    return {
        "old": make_vote(world["harbour"], 1, days_ago=3, active=True, employer=acme),
        "mid": make_vote(world["harbour"], 2, days_ago=2, active=True),
        "new": make_vote(world["harbour"], 3, days_ago=1, active=False, employer=acme),
        "hill": make_vote(world["hill"], 4, days_ago=0, active=True),
    }


# What the inactive vote (number 3) must never reveal to those without access.
HIDDEN = ("Voter Number3", "voter3@example.com", "+44 100 000 003", "Vote number 3")
# Contact details of the visible harbour votes (1 and 2).
CONTACT = ("voter1@example.com", "+44 100 000 001", "voter2@example.com", "+44 100 000 002")


def ids(response) -> list[str]:
    assert response.status_code == 200, response.get_json()
    return [item["id"] for item in response.get_json()["items"]]


# Submission


def test_employer_vote_is_stored_inactive_with_every_field(client, world):
    response = submit(client, "employer")
    assert response.status_code == 201
    body = response.get_json()
    assert set(body) == {"id", "status"}
    assert body["status"] == "received"
    vote = Vote.query.one()
    assert str(vote.id) == body["id"]
    assert vote.location_id == world["harbour"].id
    assert vote.type == VoteType.EMPLOYER
    assert vote.active is False
    assert vote.employer is None
    assert vote.your_name == BASE["yourName"]
    assert vote.your_email == BASE["yourEmail"]
    assert vote.your_phone == BASE["yourPhone"]
    assert vote.business_name == BASE["businessName"]
    assert vote.business_branch == BASE["businessBranch"]
    assert vote.vote_body == BASE["voteBody"]
    assert vote.your_position == "Baker"
    assert vote.your_business is None
    # Only the voter's receipt (API.md 8, test_vote_integrity): nothing goes to the location.
    assert [message.template for message in queued_mail()] == ["vote_receipt"]


def test_a_vote_s_address_is_validated_once_and_kept_no_longer(client, world, monkeypatch):
    """Its schema, its duplicate check and its receipt read the voter's address: the
    validator runs once per request (it cost 6 % of a vote), and the next request's
    address is its own."""
    from directory_api.platform import email_addresses

    validated = []
    real = email_addresses.validate_email

    def counting(text, **kwargs):
        validated.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(email_addresses, "validate_email", counting)
    assert submit(client, "employer").status_code == 201
    assert validated == [BASE["yourEmail"].lower()]
    other = body_for("employer") | {"yourEmail": "Other.Voter@Example.org"}
    assert submit(client, "employer", other).status_code == 201
    assert validated[1:] == ["other.voter@example.org"]
    assert submit(client, "employer").status_code == 201  # the first address, again
    assert validated[2:] == [BASE["yourEmail"].lower()]  # checked again: nothing kept


@pytest.mark.parametrize("vote_type", MAIL_TYPES)
def test_btob_and_btoc_votes_are_queued_as_mail_and_not_stored(client, world, vote_type):
    response = submit(client, vote_type)
    assert response.status_code == 202
    assert response.get_json() == {"status": "queued"}
    assert Vote.query.count() == 0
    [message] = queued_mail()
    assert message.recipients == ["votes@harbour.example"]
    assert message.reply_to == BASE["yourEmail"]
    assert message.status == OutboxStatus.PENDING


@pytest.mark.parametrize("vote_type", TYPES)
def test_the_response_never_echoes_personal_data(client, world, vote_type):
    response = submit(client, vote_type)
    assert response.status_code == SUCCESS[vote_type]
    text = response.get_data(as_text=True)
    headers = " ".join(value for _, value in response.headers)
    for value in PERSONAL:
        assert value not in text
        assert value not in headers


# Mail to the location


@pytest.fixture
def harbour(mail_app):
    return make_location("harbour", name="Harbour Café", email="votes@harbour.example")


@pytest.mark.parametrize("vote_type", MAIL_TYPES)
def test_mail_carries_every_field_to_the_location(mail_app, mailbox, harbour, vote_type):
    assert submit(mail_app.test_client(), vote_type).status_code == 202
    assert "sent 1, failed 0" in send_outbox(mail_app)
    [message] = mailbox.messages
    assert mailbox.envelopes[0][1] == ["votes@harbour.example"]
    assert message["To"] == "votes@harbour.example"
    assert message["Reply-To"] == BASE["yourEmail"]
    assert "Harbour Café" in message["Subject"]
    text = message_text(message)
    for field, value in body_for(vote_type).items():
        assert value in text, field  # voteBody with its line breaks intact
    assert queued_mail()[0].status == OutboxStatus.SENT


def test_without_a_location_email_the_owners_receive_it_and_admins_do_not(mail_app, mailbox):
    harbour = make_location("harbour", name="Harbour Market")
    hill = make_location("hill")
    grant(make_user("owner2@example.com"), harbour, Role.OWNER)
    grant(make_user("owner1@example.com"), harbour, Role.OWNER)
    grant(make_user("admin@example.com"), harbour, Role.ADMIN)
    grant(make_user("hill-owner@example.com"), hill, Role.OWNER)
    make_user("super@example.com", is_super=True)
    assert submit(mail_app.test_client(), "btoc").status_code == 202
    assert "sent 1, failed 0" in send_outbox(mail_app)
    [(_, recipients)] = mailbox.envelopes
    assert sorted(recipients) == ["owner1@example.com", "owner2@example.com"]
    assert mailbox.messages[0]["Reply-To"] == BASE["yourEmail"]


def test_without_email_or_owners_the_fallback_recipient_receives_it(app_factory, smtp_server):
    catcher, port = smtp_server
    app = app_factory(VOTE_FALLBACK_RECIPIENT="fallback@example.com", **smtp_settings(port))
    with app.app_context():
        harbour = make_location("harbour", name="Harbour Market")
        grant(make_user("admin@example.com"), harbour, Role.ADMIN)
        assert submit(app.test_client(), "btob").status_code == 202
        assert "sent 1, failed 0" in send_outbox(app)
    assert [recipients for _, recipients in catcher.envelopes] == [["fallback@example.com"]]
    assert "Bob's Bakery" in message_text(catcher.messages[0])


def test_without_any_recipient_the_message_is_kept_as_failed(app_factory, smtp_server):
    catcher, port = smtp_server
    app = app_factory(VOTE_FALLBACK_RECIPIENT=None, **smtp_settings(port))
    with app.app_context():
        make_location("harbour")
        response = submit(app.test_client(), "btoc")
        assert response.status_code == 202
        assert response.get_json() == {"status": "queued"}
        [row] = queued_mail()
        assert row.status == OutboxStatus.FAILED
        assert row.last_error
        assert row.reply_to == BASE["yourEmail"]
        assert BASE["voteBody"] in row.body  # kept for an operator to route by hand
        assert "sent 0, failed 0" in send_outbox(app)
    assert catcher.messages == []


@pytest.mark.parametrize("vote_type", MAIL_TYPES)
def test_smtp_down_still_accepts_the_vote_and_a_later_pass_delivers(
    app_factory, smtp_server, vote_type
):
    catcher, port = smtp_server
    down = app_factory(MAIL_SERVER="127.0.0.1", MAIL_PORT=1, MAIL_SUPPRESS_SEND=False)
    with down.app_context():
        make_location("harbour", name="Harbour Market", email="votes@harbour.example")
        response = submit(down.test_client(), vote_type)
        assert response.status_code == 202
        assert response.get_json() == {"status": "queued"}
        assert "sent 0, failed 1" in send_outbox(down)
        [row] = queued_mail()
        assert row.status == OutboxStatus.PENDING
        assert row.last_error
        row.next_attempt_at = utcnow() - timedelta(seconds=1)
        db.session.commit()

    up = app_factory(**smtp_settings(port))
    with up.app_context():
        assert "sent 1, failed 0" in send_outbox(up)
        assert queued_mail()[0].status == OutboxStatus.SENT
    [message] = catcher.to("votes@harbour.example")
    assert message["Reply-To"] == BASE["yourEmail"]
    assert BASE["voteBody"] in message_text(message)


# Validation


@pytest.mark.parametrize(
    ("vote_type", "field"),
    [(vote_type, field) for vote_type in TYPES for field in body_for(vote_type)],
)
def test_each_required_field_is_required(client, world, vote_type, field):
    response = submit(client, vote_type, body_for(vote_type, without=(field,)))
    assert_rejected(response, {field})


@pytest.mark.parametrize("vote_type", TYPES)
def test_every_problem_is_reported_at_once(client, world, vote_type):
    body = body_for(
        vote_type,
        without=("yourName",),
        yourEmail="not-an-address",
        businessName="Acme\nLtd",
        voteBody="x" * 5001,
        surprise="x",
    )
    assert_rejected(
        submit(client, vote_type, body),
        {"yourName", "yourEmail", "businessName", "voteBody", "surprise"},
    )


@pytest.mark.parametrize(
    ("vote_type", "field", "value"),
    [
        ("btoc", "yourBusiness", "Bob's Bakery"),
        ("employer", "yourBusiness", "Bob's Bakery"),
        ("btob", "yourPosition", "Baker"),
        ("btoc", "yourPosition", "Baker"),
        ("btob", "employer", "acme"),
        ("btoc", "employer", "acme"),
        ("employer", "active", True),
        ("employer", "type", "btob"),
    ],
)
def test_fields_of_another_type_are_unknown(client, world, vote_type, field, value):
    response = submit(client, vote_type, body_for(vote_type, **{field: value}))
    assert_rejected(response, {field})
    assert response.get_json()["errors"][field] == ["Unknown field."]


@pytest.mark.parametrize(
    "value",
    [42, ["Ann"], {"name": "Ann"}, True, None],
    ids=["number", "list", "object", "true", "null"],
)
@pytest.mark.parametrize("vote_type", TYPES)
def test_non_string_values_are_422(client, world, vote_type, value):
    assert_rejected(submit(client, vote_type, body_for(vote_type, yourName=value)), {"yourName"})


@pytest.mark.parametrize(("field", "length"), [("yourName", 201), ("voteBody", 5001)])
@pytest.mark.parametrize("vote_type", TYPES)
def test_too_long_values_are_422(client, world, vote_type, field, length):
    response = submit(client, vote_type, body_for(vote_type, **{field: "x" * length}))
    assert_rejected(response, {field})


@pytest.mark.parametrize("vote_type", TYPES)
def test_values_at_the_maximum_length_are_accepted(client, world, vote_type):
    body = body_for(vote_type, yourName="n" * 200, voteBody="v" * 5000)
    assert submit(client, vote_type, body).status_code == SUCCESS[vote_type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("yourName", "A\nB"),
        ("businessName", "Acme\rLtd"),
        ("businessBranch", "North\r\nSouth"),
        ("yourPhone", "+44 20\n7946"),
    ],
)
@pytest.mark.parametrize("vote_type", TYPES)
def test_a_line_break_in_a_one_line_field_is_422(client, world, vote_type, field, value):
    response = submit(client, vote_type, body_for(vote_type, **{field: value}))
    assert_rejected(response, {field})


@pytest.mark.parametrize(
    ("vote_type", "field"), [("btob", "yourBusiness"), ("employer", "yourPosition")]
)
def test_a_line_break_in_a_type_specific_field_is_422(client, world, vote_type, field):
    response = submit(client, vote_type, body_for(vote_type, **{field: "One\nTwo"}))
    assert_rejected(response, {field})


@pytest.mark.parametrize("value", ["Ann\u2028E-mail: x@example.com", "Ann\u2029B", "Ann\x85B"])
def test_a_unicode_line_break_in_a_one_line_field_is_422(client, world, value):
    response = submit(client, "btob", body_for("btob", yourName=value))
    assert_rejected(response, {"yourName"})


@pytest.mark.parametrize("vote_type", TYPES)
def test_vote_body_may_span_lines(client, world, vote_type):
    text = "First line\r\nSecond line\n\nLast line"
    response = submit(client, vote_type, body_for(vote_type, voteBody=text))
    assert response.status_code == SUCCESS[vote_type]
    if vote_type == "employer":
        assert Vote.query.one().vote_body == text
    else:
        assert text in queued_mail()[0].body


@pytest.mark.parametrize("address", ["not-an-address", "ann@", "@example.com", "ann@@example.com"])
@pytest.mark.parametrize("vote_type", TYPES)
def test_invalid_email_is_422(client, world, vote_type, address):
    response = submit(client, vote_type, body_for(vote_type, yourEmail=address))
    assert_rejected(response, {"yourEmail"})


@pytest.mark.parametrize("vote_type", TYPES)
def test_header_injection_through_your_email_is_refused(client, world, vote_type):
    injected = "a@example.com\r\nBcc: x@example.com"
    response = submit(client, vote_type, body_for(vote_type, yourEmail=injected))
    assert_rejected(response, {"yourEmail"})
    assert "x@example.com" not in response.get_data(as_text=True)


@pytest.mark.parametrize(
    ("vote_type", "field"),
    [
        (vote_type, field)
        for vote_type in TYPES
        for field in ("yourName", "yourPhone", "voteBody", *EXTRA[vote_type])
    ],
)
def test_a_blank_required_field_is_missing(client, world, vote_type, field):
    response = submit(client, vote_type, body_for(vote_type, **{field: " \t\n "}))
    assert_rejected(response, {field})


@pytest.mark.parametrize("vote_type", TYPES)
def test_a_rejected_submission_does_not_echo_personal_data(client, world, vote_type):
    body = body_for(vote_type, yourEmail="ann voter@example", yourPhone="call Ann Voter")
    response = submit(client, vote_type, body)
    assert_rejected(response, {"yourEmail", "yourPhone"})
    text = response.get_data(as_text=True)
    assert "ann voter@example" not in text
    assert "Ann Voter" not in text


@pytest.mark.parametrize("vote_type", TYPES)
def test_a_body_over_the_size_limit_is_413(client, world, vote_type):
    response = submit(client, vote_type, body_for(vote_type, voteBody="x" * 70_000))
    assert_problem(response, 413)
    assert Vote.query.count() == 0
    assert queued_mail() == []


@pytest.mark.parametrize("vote_type", TYPES)
def test_a_body_that_is_not_an_object_is_422(client, world, vote_type):
    response = submit(client, vote_type, [body_for(vote_type)])
    assert_problem(response, 422)
    assert Vote.query.count() == 0
    assert queued_mail() == []


@pytest.mark.parametrize("vote_type", TYPES)
def test_unknown_location_is_404(client, world, vote_type):
    assert_problem(submit(client, vote_type, location="nowhere"), 404)
    assert queued_mail() == []


def test_unknown_type_is_404(client, world):
    for vote_type in ("other", "BTOB", "employers"):
        assert_problem(submit(client, vote_type, body_for("btoc")), 404)
    assert queued_mail() == []


@pytest.mark.parametrize(
    ("data", "content_type", "status"),
    [('{"yourName": ', "application/json", 400), ("yourName=Ann", "text/plain", 415)],
    ids=["malformed-json-400", "text-plain-415"],
)
@pytest.mark.parametrize("vote_type", TYPES)
def test_an_unreadable_body_is_refused(client, world, vote_type, data, content_type, status):
    response = client.post(f"{VOTES}submit/{vote_type}", data=data, content_type=content_type)
    assert_problem(response, status)
    assert Vote.query.count() == 0
    assert queued_mail() == []


# Form bodies

FORMS = pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "multipart/form-data"],
    ids=["urlencoded", "multipart"],
)


@FORMS
@pytest.mark.parametrize("vote_type", TYPES)
def test_form_submissions_are_accepted(client, world, vote_type, content_type):
    response = client.post(
        f"{VOTES}submit/{vote_type}", data=body_for(vote_type), content_type=content_type
    )
    assert response.status_code == SUCCESS[vote_type]
    if vote_type == "employer":
        vote = Vote.query.one()
        assert (vote.your_name, vote.your_email, vote.vote_body, vote.your_position) == (
            BASE["yourName"],
            BASE["yourEmail"],
            BASE["voteBody"],
            "Baker",
        )
    else:
        [message] = queued_mail()
        assert message.reply_to == BASE["yourEmail"]
        assert BASE["voteBody"] in message.body


@FORMS
@pytest.mark.parametrize("vote_type", TYPES)
def test_form_submissions_report_missing_and_empty_fields(client, world, vote_type, content_type):
    body = body_for(vote_type, without=("yourEmail", "voteBody"), yourName="")
    response = client.post(f"{VOTES}submit/{vote_type}", data=body, content_type=content_type)
    assert_rejected(response, {"yourEmail", "voteBody", "yourName"})


@FORMS
def test_form_fields_of_another_type_are_unknown(client, world, content_type):
    body = body_for("btoc", yourBusiness="Bob's Bakery")
    response = client.post(f"{VOTES}submit/btoc", data=body, content_type=content_type)
    assert_rejected(response, {"yourBusiness"})


# Linking an employer vote to an employer


@pytest.fixture
def employers(world):
    make_listing("employer", world["harbour"], "acme", name="Acme Ltd")
    make_listing("employer", world["harbour"], "globex", name="Globex")
    make_listing("employer", world["hill"], "initech", name="Initech")
    make_listing("business", world["harbour"], "corner-shop", name="Corner Shop")


def linked_employer() -> str | None:
    vote = Vote.query.one()
    return vote.employer.slug if vote.employer else None


def test_an_employer_slug_links_the_vote(client, super_client, employers):
    # The slug wins over a businessName that names another employer.
    response = submit(client, "employer", body_for("employer", employer="globex"))
    assert response.status_code == 201
    assert linked_employer() == "globex"
    shown = super_client.get(f"{VOTES}id/{response.get_json()['id']}")
    assert shown.status_code == 200
    assert shown.get_json()["employer"] == "globex"


@pytest.mark.parametrize(
    ("named", "said"),
    [
        ({"employer": "globex"}, "about the employer Globex."),
        ({"businessName": "acme LTD"}, "about the employer Acme Ltd."),
        ({"businessName": "Nobody Ltd"}, "about an employer."),
    ],
    ids=["by-slug", "by-name", "none"],
)
def test_the_receipt_names_the_employer_the_vote_is_linked_to(client, employers, named, said):
    """Read by slug as columns (not loaded as an object, issue 36) or found by name, the
    employer's name is the receipt's."""
    assert submit(client, "employer", body_for("employer", **named)).status_code == 201
    [receipt] = queued_mail(template="vote_receipt")
    assert said in " ".join(receipt.body.split())


@pytest.mark.parametrize("slug", ["initech", "nobody", "corner-shop", "Not A Slug"], ids=str)
def test_an_employer_slug_not_of_this_locations_employers_is_422(client, employers, slug):
    response = submit(client, "employer", body_for("employer", employer=slug))
    assert_rejected(response, {"employer"})


@pytest.mark.parametrize(
    ("business_name", "expected"),
    [
        ("Acme Ltd", "acme"),
        ("ACME ltd", "acme"),
        ("  acme LTD  ", "acme"),
        ("Acme", None),
        ("Acme Ltd.", None),
        ("Initech", None),  # an employer of another location
        ("Corner Shop", None),  # a business, not an employer
    ],
)
def test_without_a_slug_the_employer_named_like_the_business_is_linked(
    client, employers, business_name, expected
):
    response = submit(client, "employer", body_for("employer", businessName=business_name))
    assert response.status_code == 201
    assert linked_employer() == expected


# Rate limit


def test_submissions_are_rate_limited_per_ip(app_factory):
    app = app_factory(RATELIMIT_VOTES_PER_IP="2/hour")
    with app.app_context():
        make_location("harbour", email="votes@harbour.example")
        client = app.test_client()
        first = submit(client, "btoc")
        assert first.status_code == 202
        assert first.headers["X-RateLimit-Limit"] == "2"
        assert first.headers["X-RateLimit-Remaining"] == "1"
        assert "Retry-After" not in first.headers  # accepted: nothing to wait for
        assert submit(client, "employer").status_code == 201
        limited = submit(client, "btob")
        assert_problem(limited, 429)
        assert int(limited.headers["Retry-After"]) > 0
        assert limited.get_json()["detail"] in (
            "At most 2 votes from one address per hour; try again in 60 minutes.",
            "At most 2 votes from one address per hour; try again in 1 hour.",
        )
        other = submit(client, "btob", environ_base={"REMOTE_ADDR": "10.9.8.7"})
        assert other.status_code == 202
        assert Vote.query.count() == 1
        assert len(queued_mail(template="vote")) == 2


def test_an_ipv6_client_is_limited_by_its_64_network(app_factory):
    """One subscriber holds a whole /64: a fresh address in it is no fresh allowance. An
    IPv4 client seen through an IPv6 socket is its IPv4 address."""
    app = app_factory(RATELIMIT_VOTES_PER_IP="2/hour")
    with app.app_context():
        make_location("harbour", email="votes@harbour.example")
        client = app.test_client()

        def from_address(address: str):
            return submit(client, "btoc", environ_base={"REMOTE_ADDR": address})

        assert from_address("2001:db8:5:6::1").status_code == 202
        assert from_address("2001:db8:5:6:ffff:1:2:3").status_code == 202
        assert_problem(from_address("2001:db8:5:6::abcd"), 429)
        assert from_address("2001:db8:5:7::1").status_code == 202  # the next /64
        assert from_address("192.0.2.44").status_code == 202
        assert from_address("192.0.2.44").status_code == 202
        assert_problem(from_address("::ffff:192.0.2.44"), 429)


def test_the_default_limit_is_ten_submissions_an_hour(client, world):
    statuses = [submit(client, "btoc").status_code for _ in range(11)]
    assert statuses == [202] * 10 + [429]
    assert len(queued_mail()) == 10


# Reading


@pytest.mark.parametrize("who", ["anonymous", "plain", "other_owner", "other_admin"])
def test_without_access_inactive_votes_and_contact_details_are_hidden(clients, votes, who):
    client = clients[who]
    listed = client.get(VOTES)
    assert ids(listed) == [votes["mid"], votes["old"]]
    assert listed.get_json()["total"] == 2
    assert all(set(item) == PUBLIC_KEYS for item in listed.get_json()["items"])
    one = client.get(f"{VOTES}id/{votes['old']}")
    assert one.status_code == 200
    assert set(one.get_json()) == PUBLIC_KEYS
    assert one.get_json()["employer"] == "acme"
    hidden = client.get(f"{VOTES}id/{votes['new']}")
    assert_problem(hidden, 404)
    for response in (listed, one, hidden):
        text = response.get_data(as_text=True)
        for secret in (*CONTACT, *HIDDEN):
            assert secret not in text


@pytest.mark.parametrize("who", ["owner", "admin", "super"])
def test_with_access_every_vote_and_contact_details_are_shown(clients, votes, who):
    client = clients[who]
    listed = client.get(VOTES)
    assert ids(listed) == [votes["new"], votes["mid"], votes["old"]]
    assert all(set(item) == FULL_KEYS for item in listed.get_json()["items"])
    one = client.get(f"{VOTES}id/{votes['new']}")
    assert one.status_code == 200
    shown = one.get_json()
    assert set(shown) == FULL_KEYS
    assert shown["active"] is False
    assert shown["type"] == "employer"
    assert shown["employer"] == "acme"
    assert shown["yourEmail"] == "voter3@example.com"
    assert shown["yourPhone"] == "+44 100 000 003"
    assert shown["yourPosition"] == "Clerk"
    assert shown["yourBusiness"] is None


def test_votes_are_listed_newest_first_unless_sorted(clients, votes):
    assert ids(clients["anonymous"].get(VOTES)) == [votes["mid"], votes["old"]]
    assert ids(clients["anonymous"].get(VOTES + "?sort=createdAt")) == [votes["old"], votes["mid"]]
    assert ids(clients["owner"].get(VOTES + "?perPage=1&page=2")) == [votes["mid"]]
    assert_problem(clients["owner"].get(VOTES + "?sort=yourEmail"), 422)


def test_employer_filter(clients, votes):
    assert ids(clients["anonymous"].get(VOTES + "?employer=acme")) == [votes["old"]]
    assert ids(clients["owner"].get(VOTES + "?employer=acme")) == [votes["new"], votes["old"]]
    # Another location's employer, or none at all: an empty page.
    for slug in ("hill-corp", "nobody"):
        response = clients["owner"].get(VOTES + f"?employer={slug}")
        assert ids(response) == []
        assert response.get_json()["total"] == 0


@pytest.mark.parametrize("who", ["owner", "admin", "super"])
def test_staff_can_list_only_inactive_or_only_active_votes(clients, votes, who):
    client = clients[who]
    assert ids(client.get(VOTES + "?active=false")) == [votes["new"]]
    assert ids(client.get(VOTES + "?active=0")) == [votes["new"]]
    assert ids(client.get(VOTES + "?active=true")) == [votes["mid"], votes["old"]]


@pytest.mark.parametrize("who", ["anonymous", "plain", "other_admin"])
def test_without_access_active_false_is_an_empty_page(clients, votes, who):
    response = clients[who].get(VOTES + "?active=false")
    assert ids(response) == []
    assert response.get_json()["total"] == 0
    assert ids(clients[who].get(VOTES + "?active=true")) == [votes["mid"], votes["old"]]


@pytest.mark.parametrize("who", ["anonymous", "owner"])
def test_an_invalid_active_filter_is_422(clients, votes, who):
    response = clients[who].get(VOTES + "?active=maybe")
    assert_problem(response, 422)
    assert "active" in response.get_json()["errors"]


def test_reading_an_unknown_location_is_404(clients, votes):
    for path in ("", f"id/{votes['old']}"):
        assert_problem(clients["super"].get(f"/locations/nowhere/votes/{path}"), 404)


@pytest.mark.parametrize("vote_id", ["12", "not-a-uuid", "0" * 32 + "x"])
def test_a_non_uuid_id_is_404(clients, votes, vote_id):
    assert_problem(clients["super"].get(f"{VOTES}id/{vote_id}"), 404)


@pytest.mark.parametrize("who", ["anonymous", "owner", "super"])
def test_a_vote_of_another_location_is_404(clients, votes, who):
    assert_problem(clients[who].get(f"{VOTES}id/{votes['hill']}"), 404)
    assert_problem(clients[who].get(f"{VOTES}id/{uuid.uuid4()}"), 404)


# Moderation


def by_hand(**changes) -> dict:
    return {**BASE, "yourPosition": "Baker", **changes}


# Every 401 and 403 (and that nothing changed) is test_role_matrix.py's.


@pytest.mark.parametrize("who", ["owner", "admin", "super"])
def test_the_locations_staff_create_update_and_delete(clients, world, votes, who):
    client = clients[who]
    created = client.post(VOTES, json=by_hand())
    assert created.status_code == 201
    assert Vote.query.count() == 5
    assert client.put(VOTES, json={"id": votes["new"], "active": True}).status_code == 200
    assert db.session.get(Vote, uuid.UUID(votes["new"])).active is True
    assert client.delete(VOTES, json={"id": votes["new"]}).status_code == 204
    assert db.session.get(Vote, uuid.UUID(votes["new"])) is None


def test_a_vote_entered_by_hand_is_an_employer_vote_at_its_location(clients, world, votes):
    response = clients["admin"].post(VOTES, json=by_hand(active=True, employer="acme"))
    assert response.status_code == 201
    created = response.get_json()
    assert set(created) == FULL_KEYS
    assert created["type"] == "employer"
    assert created["active"] is True
    assert created["employer"] == "acme"
    assert created["yourEmail"] == BASE["yourEmail"]
    assert created["voteBody"] == BASE["voteBody"]
    assert created["yourPosition"] == "Baker"
    assert created["yourBusiness"] is None
    location = response.headers["Location"]
    assert location == f"{VOTES}id/{created['id']}"
    assert clients["admin"].get(location).get_json() == created
    public = clients["anonymous"].get(location)
    assert public.status_code == 200
    assert set(public.get_json()) == PUBLIC_KEYS
    vote = db.session.get(Vote, uuid.UUID(created["id"]))
    assert vote.type == VoteType.EMPLOYER
    assert vote.location_id == world["harbour"].id


def test_a_vote_entered_by_hand_is_inactive_and_unlinked_unless_said(clients, world):
    response = clients["owner"].post(VOTES, json=by_hand())
    assert response.status_code == 201
    assert response.get_json()["active"] is False
    assert response.get_json()["employer"] is None
    assert_problem(clients["anonymous"].get(response.headers["Location"]), 404)


@pytest.mark.parametrize(
    ("changes", "fields"),
    [
        ({"yourName": None}, {"yourName"}),
        ({"yourBusiness": "Bob's Bakery"}, {"yourBusiness"}),
        ({"type": "btob"}, {"type"}),
        ({"employer": "hill-corp"}, {"employer"}),
        ({"employer": "nobody"}, {"employer"}),
        ({"active": "yes"}, {"active"}),
        ({"yourEmail": "a@example.com\r\nBcc: x@example.com"}, {"yourEmail"}),
    ],
    ids=[
        "null-name",
        "yourBusiness",
        "type",
        "foreign-employer",
        "unknown-employer",
        "active-str",
        "injection",
    ],
)
def test_a_vote_entered_by_hand_is_validated(clients, votes, changes, fields):
    response = clients["owner"].post(VOTES, json=by_hand(**changes))
    assert_problem(response, 422)
    assert set(response.get_json()["errors"]) == fields
    assert Vote.query.count() == 4


def test_activating_a_vote_makes_it_public_without_contact_details(clients, votes):
    response = clients["owner"].put(VOTES, json={"id": votes["new"], "active": True})
    assert response.status_code == 200
    assert response.get_json()["active"] is True
    assert response.get_json()["yourEmail"] == "voter3@example.com"
    public = clients["anonymous"].get(f"{VOTES}id/{votes['new']}")
    assert public.status_code == 200
    assert set(public.get_json()) == PUBLIC_KEYS
    assert "voter3@example.com" not in public.get_data(as_text=True)
    assert "+44 100 000 003" not in public.get_data(as_text=True)
    assert ids(clients["anonymous"].get(VOTES)) == [votes["new"], votes["mid"], votes["old"]]
    # And deactivating hides it again.
    hidden = clients["admin"].put(VOTES, json={"id": votes["new"], "active": False})
    assert hidden.status_code == 200
    assert_problem(clients["anonymous"].get(f"{VOTES}id/{votes['new']}"), 404)


def test_moderation_links_and_unlinks_an_employer(clients, votes, world):
    make_listing("employer", world["harbour"], "globex", name="Globex")
    client = clients["admin"]
    changed = client.put(VOTES, json={"id": votes["mid"], "employer": "globex"})
    assert changed.status_code == 200
    assert changed.get_json()["employer"] == "globex"
    assert ids(clients["anonymous"].get(VOTES + "?employer=globex")) == [votes["mid"]]
    cleared = client.put(VOTES, json={"id": votes["mid"], "employer": None})
    assert cleared.status_code == 200
    assert cleared.get_json()["employer"] is None
    assert db.session.get(Vote, uuid.UUID(votes["mid"])).employer_id is None
    for slug in ("hill-corp", "nobody"):
        refused = client.put(VOTES, json={"id": votes["mid"], "employer": slug})
        assert_problem(refused, 422)
        assert set(refused.get_json()["errors"]) == {"employer"}
    assert db.session.get(Vote, uuid.UUID(votes["mid"])).employer_id is None


def test_moderation_corrects_text_fields_and_keeps_the_rest(clients, votes):
    changes = {
        "yourName": "Voter Corrected",
        "businessBranch": "North",
        "voteBody": "Line one\nLine two",
        "yourPosition": "Manager",
    }
    response = clients["owner"].put(VOTES, json={"id": votes["new"], **changes})
    assert response.status_code == 200
    shown = response.get_json()
    for field, value in changes.items():
        assert shown[field] == value
    assert shown["yourEmail"] == "voter3@example.com"
    assert shown["active"] is False
    assert shown["employer"] == "acme"
    vote = db.session.get(Vote, uuid.UUID(votes["new"]))
    assert (vote.your_name, vote.vote_body) == ("Voter Corrected", "Line one\nLine two")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"yourName": "A\nB"}, "yourName"),
        ({"yourName": "   "}, "yourName"),
        ({"yourEmail": "nope"}, "yourEmail"),
        ({"voteBody": "x" * 5001}, "voteBody"),
        ({"active": "true"}, "active"),
    ],
    ids=["line-break", "blank", "email", "too-long", "active-str"],
)
def test_moderation_validates_text_fields(clients, votes, changes, field):
    response = clients["owner"].put(VOTES, json={"id": votes["new"], **changes})
    assert_problem(response, 422)
    assert set(response.get_json()["errors"]) == {field}
    vote = db.session.get(Vote, uuid.UUID(votes["new"]))
    assert (vote.your_name, vote.active) == ("Voter Number3", False)


def test_moderating_an_unknown_or_another_locations_vote_is_404(clients, votes):
    for vote_id in (str(uuid.uuid4()), votes["hill"]):
        assert_problem(clients["owner"].put(VOTES, json={"id": vote_id, "active": False}), 404)
    assert db.session.get(Vote, uuid.UUID(votes["hill"])).active is True


def test_moderation_without_an_id_is_422(clients, votes):
    for body in ({"active": True}, {"id": "not-a-uuid", "active": True}):
        response = clients["owner"].put(VOTES, json=body)
        assert_problem(response, 422)
        assert set(response.get_json()["errors"]) == {"id"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("type", "btob"),
        ("yourBusiness", "Bob's Bakery"),
        ("location", "hill"),
        ("createdAt", "2020-01-01T00:00:00Z"),
    ],
)
def test_moderation_cannot_change_type_location_or_timestamps(clients, votes, field, value):
    response = clients["owner"].put(VOTES, json={"id": votes["new"], field: value})
    assert_problem(response, 422)
    assert set(response.get_json()["errors"]) == {field}
    assert db.session.get(Vote, uuid.UUID(votes["new"])).type == VoteType.EMPLOYER


def test_moderation_takes_json_only(clients, votes):
    response = clients["owner"].put(
        VOTES, data={"id": votes["new"], "active": "true"}, content_type="multipart/form-data"
    )
    assert_problem(response, 415)
    assert db.session.get(Vote, uuid.UUID(votes["new"])).active is False


def test_delete_removes_the_vote(clients, votes):
    response = clients["owner"].delete(VOTES, json={"id": votes["new"]})
    assert response.status_code == 204
    assert response.get_data() == b""
    assert db.session.get(Vote, uuid.UUID(votes["new"])) is None
    assert Vote.query.count() == 3
    assert_problem(clients["owner"].get(f"{VOTES}id/{votes['new']}"), 404)
    assert_problem(clients["owner"].delete(VOTES, json={"id": votes["new"]}), 404)


def test_deleting_another_locations_vote_is_404(clients, votes):
    assert_problem(clients["owner"].delete(VOTES, json={"id": votes["hill"]}), 404)
    assert_problem(clients["owner"].delete(VOTES, json={"id": str(uuid.uuid4())}), 404)
    assert db.session.get(Vote, uuid.UUID(votes["hill"])) is not None
    assert Vote.query.count() == 4


def test_delete_without_an_id_is_422(clients, votes):
    response = clients["owner"].delete(VOTES, json={})
    assert_problem(response, 422)
    assert "id" in response.get_json()["errors"]
    assert Vote.query.count() == 4


def test_owners_who_have_not_registered_get_no_vote_mail(app_factory):
    from .conftest import queued_mail
    from .factories import grant, make_location, make_user

    app = app_factory(VOTE_FALLBACK_RECIPIENT="fallback@example.com")
    with app.app_context():
        location = make_location("quiet")
        grant(make_user("invited@example.com", password=None), location, Role.OWNER)
        body = {
            "yourName": "Val",
            "yourEmail": "val@example.com",
            "yourPhone": "+44 1",
            "businessName": "Acme",
            "businessBranch": "Main",
            "voteBody": "Good",
        }
        assert (
            app.test_client().post("/locations/quiet/votes/submit/btoc", json=body).status_code
            == 202
        )
        assert [m.recipients for m in queued_mail()] == [["fallback@example.com"]]
