"""Votes: one submission schema per type on a shared base, and two views of a vote."""

from typing import Any

from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from ..models import VoteType
from ..platform.output import PlannedDump, Timestamp
from ..platform.pagination import ListArgs
from .base import BaseSchema, Resource, all_but, all_optional
from .fields import Bool, Email, Instant, LongText, Phone, QueryBool, Slug, SlugOf, Text


class VoteSubmission(BaseSchema):
    """The fields every type shares (all strings; one-line fields refuse line breaks)."""

    your_name = Text(required=True, data_key="yourName")
    your_email = Email(required=True, data_key="yourEmail")
    your_phone = Phone(required=True, data_key="yourPhone")
    business_name = Text(required=True, data_key="businessName")
    business_branch = Text(required=True, data_key="businessBranch")
    vote_body = LongText(required=True, data_key="voteBody")


class PublicForm(Schema):
    """What a public form sends besides the vote: the widget's proof of work and the
    honeypot (API.md 17), taken out before the vote is made
    (vote_integrity.screen_submission). Any value is taken here; the check says what is
    wrong with it."""

    altcha = fields.Raw(
        load_only=True,
        metadata={
            "type": "string",
            "description": "The ALTCHA widget's solution of a challenge from "
            "GET /locations/{slug}/votes/challenge (base64 JSON), as the widget sends it.",
        },
    )
    website = fields.Raw(
        load_only=True,
        metadata={"type": "string", "description": "Leave empty: a field people do not see."},
    )


class BtobSubmission(VoteSubmission, PublicForm):
    your_business = Text(required=True, data_key="yourBusiness")


class BtocSubmission(VoteSubmission, PublicForm):
    pass


class EmployerVote(VoteSubmission):
    your_position = Text(required=True, data_key="yourPosition")
    employer = Slug()  # optional: else the employer whose name equals businessName


class EmployerSubmission(EmployerVote, PublicForm):
    """The public's employer vote: it gets a receipt."""

    @post_load(pass_original=True)
    def keep_typed_address(self, data: dict[str, Any], original: Any, **_: Any) -> dict[str, Any]:
        """The address as typed (`typed_email`), where the receipt goes (API.md 8); the vote
        keeps it in its one spelling, like every stored address."""
        data["typed_email"] = str(original["yourEmail"]).strip()
        return data


class VoteIn(EmployerVote):
    """A vote entered by staff (e.g. from paper): the employer type's fields and moderation."""

    active = Bool(load_default=False)
    employer = Slug(allow_none=True)


class VoteTarget(BaseSchema):
    id = fields.UUID(required=True)


class VoteUpdate(all_optional(VoteIn, "VoteChanges"), VoteTarget):
    """Moderation: `id` names the vote; every other field is optional."""


# A reply (API.md 15), read from the vote's own `reply_*` columns (Vote.reply).
REPLY_LENGTH = 2000


class ReplyIn(BaseSchema):
    body = Text(required=True, max_length=REPLY_LENGTH, multiline=True)


class ReplyAuthor(PlannedDump):
    id = fields.UUID()
    email = fields.String()


class PublicReplyOut(PlannedDump):
    """A reply as everyone sees it: who wrote it is the staff's to know."""

    body = fields.String(attribute="reply_body")
    created_at = Timestamp(data_key="createdAt", attribute="reply_created_at")
    updated_at = Timestamp(data_key="updatedAt", attribute="reply_updated_at")


class ReplyOut(PublicReplyOut):
    """A reply as the location's staff see it, with who wrote its text last (null once
    that account is deleted)."""

    author = fields.Nested(ReplyAuthor, attribute="reply_author", allow_none=True)


class VoteOut(Resource):
    """A vote as those with access to the location see it."""

    type = fields.Function(
        lambda vote: vote.type.value, metadata={"enum": [kind.value for kind in VoteType]}
    )
    active = fields.Boolean()
    employer = SlugOf()
    # Null once redacted (PII_RETENTION_DAYS after submission; API.md 9).
    your_name = fields.String(data_key="yourName", allow_none=True)
    your_email = fields.String(data_key="yourEmail", allow_none=True)
    your_phone = fields.String(data_key="yourPhone", allow_none=True)
    business_name = fields.String(data_key="businessName")
    business_branch = fields.String(data_key="businessBranch", allow_none=True)
    vote_body = fields.String(data_key="voteBody")
    your_business = fields.String(data_key="yourBusiness", allow_none=True)
    your_position = fields.String(data_key="yourPosition", allow_none=True)
    redacted = fields.Boolean()
    # Vote integrity (API.md 8): staff only.
    confirmed = fields.Boolean()
    confirmed_at = Timestamp(data_key="confirmedAt", allow_none=True)
    duplicate_of = fields.UUID(data_key="duplicateOf", attribute="duplicate_of_id", allow_none=True)
    # Held as possibly automated (API.md 17): staff only.
    suspect = fields.Boolean()
    reply = fields.Nested(ReplyOut, allow_none=True)


class VoteCsvOut(VoteOut):
    """A vote as a row of the CSV export: the reply's text as a column of its own."""

    reply_body = fields.String(data_key="replyBody", allow_none=True)

    class Meta:
        exclude = ("reply",)


# What anyone without access to the location sees of a vote, and nothing else: no way to
# reach the person who wrote it, nothing of its moderation. An allow-list: a field added
# to VoteOut is for staff until it is added here.
PUBLIC_VOTE_FIELDS = (
    "id",
    "type",
    "active",
    "employer",
    "your_name",
    "business_name",
    "business_branch",
    "vote_body",
    "your_business",
    "your_position",
    "created_at",
    "updated_at",
    "reply",
)


class PublicVoteOut(VoteOut):
    """A vote as everyone else sees it (PUBLIC_VOTE_FIELDS)."""

    reply = fields.Nested(PublicReplyOut, allow_none=True)

    class Meta:
        exclude = all_but(VoteOut, PUBLIC_VOTE_FIELDS)


class SubjectVoteOut(VoteOut):
    """A vote in its submitter's data export (API.md 9): everything held of them, and a
    reply without its author (a staff member's address is not the voter's data)."""

    reply = fields.Nested(PublicReplyOut, allow_none=True)


# The filters only staff may use (API.md 8, 15): what they select is moderation.
STAFF_FILTERS = ("confirmed", "duplicate", "replied", "suspect")


class VoteListArgs(ListArgs):
    employer = Slug()
    active = QueryBool()
    confirmed = QueryBool(metadata={"description": "Staff only."})
    duplicate = QueryBool(metadata={"description": "Staff only: flagged as a duplicate."})
    replied = QueryBool(metadata={"description": "Staff only: answered by a reply."})
    suspect = QueryBool(metadata={"description": "Staff only: held as possibly automated."})


class VoteSummaryEmployer(PlannedDump):
    employer = fields.String(required=True, attribute="slug")
    name = fields.String(required=True)
    active = fields.Integer(required=True)
    pending = fields.Integer(required=True)


class VoteSummaryOut(PlannedDump):
    """The moderation queue at a glance (API.md 8)."""

    pending = fields.Integer(required=True, metadata={"description": "Inactive votes."})
    unconfirmed = fields.Integer(required=True)
    duplicates = fields.Integer(required=True)
    active = fields.Integer(required=True)
    unanswered = fields.Integer(
        required=True, metadata={"description": "Active votes without a reply."}
    )
    suspect = fields.Integer(
        required=True, metadata={"description": "Votes held as possibly automated."}
    )
    employers = fields.List(fields.Nested(VoteSummaryEmployer), required=True)


class VoteResultOut(PlannedDump):
    """An employer's active, non-duplicate employer votes."""

    employer = fields.String(required=True, attribute="slug")
    name = fields.String(required=True)
    votes = fields.Integer(required=True, attribute="vote_count")


# Bulk moderation (API.md 15): what a request may select and do.
BULK_IDS = 500
BULK_ACTIONS = ("activate", "deactivate", "delete", "setEmployer", "clearSuspect")


class VoteBulkFilter(BaseSchema):
    """Votes of the location selected by what they are; every field given must hold."""

    active = Bool()
    confirmed = Bool()
    duplicate = Bool(metadata={"description": "Flagged as a duplicate."})
    suspect = Bool(metadata={"description": "Held as possibly automated."})
    employer = Slug(
        allow_none=True,
        metadata={"description": "Linked to this employer of the location (null: to none)."},
    )
    submitted_before = Instant(
        data_key="submittedBefore", metadata={"description": "Submitted before this moment."}
    )


class VoteBulkIn(BaseSchema):
    """One action on many votes of a location: named by `ids`, or selected by `filter`
    (exactly one of the two). `employer` goes with `setEmployer`, and only with it."""

    ids = fields.List(
        fields.UUID(),
        validate=validate.Length(min=1, max=BULK_IDS),
        metadata={"description": f"1 to {BULK_IDS} votes of the location."},
    )
    filter = fields.Nested(VoteBulkFilter)
    action = fields.String(required=True, validate=validate.OneOf(BULK_ACTIONS))
    employer = Slug(
        allow_none=True,
        metadata={"description": "With setEmployer: the employer to link (null: none)."},
    )
    dry_run = Bool(
        data_key="dryRun",
        load_default=False,
        metadata={"description": "Count what would change, and change nothing."},
    )

    @validates_schema
    def one_selection(self, data: dict[str, Any], **_: Any) -> None:
        if ("ids" in data) == ("filter" in data):
            raise ValidationError("Give either ids or filter.", "ids")
        if data["action"] == "setEmployer" and "employer" not in data:
            raise ValidationError("setEmployer needs the employer (null: none).", "employer")
        if data["action"] != "setEmployer" and "employer" in data:
            raise ValidationError("Only setEmployer takes an employer.", "employer")


class VoteBulkOut(PlannedDump):
    matched = fields.Integer(required=True, metadata={"description": "Votes selected."})
    changed = fields.Integer(
        required=True, metadata={"description": "Votes the action changed (or would change)."}
    )
    dry_run = fields.Boolean(required=True, data_key="dryRun")


class ChallengeOut(Schema):
    """A proof-of-work challenge (the ALTCHA protocol): find `number` from 0 to `maxnumber`
    whose SHA-256 after `salt` is `challenge`."""

    algorithm = fields.String(required=True, metadata={"enum": ["SHA-256"]})
    challenge = fields.String(required=True)
    maxnumber = fields.Integer(required=True)
    salt = fields.String(required=True)
    signature = fields.String(required=True)


class HeldMessageOut(PlannedDump):
    """A business vote's mail held as possibly automated (API.md 17), until staff release
    or discard it."""

    id = fields.UUID(required=True)
    subject = fields.String(required=True)
    body = fields.String(required=True, allow_none=True)
    reply_to = fields.String(required=True, data_key="replyTo", allow_none=True)
    created_at = Timestamp(required=True, data_key="createdAt")
