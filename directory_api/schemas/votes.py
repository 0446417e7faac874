"""Votes: one submission schema per type on a shared base, and two views of a vote."""

from marshmallow import fields

from ..models import VoteType
from ..pagination import ListArgs
from .base import BaseSchema, Resource, all_optional
from .fields import Bool, Email, LongText, Phone, QueryBool, Slug, SlugOf, Text


class VoteSubmission(BaseSchema):
    """The fields every type shares (all strings; one-line fields refuse line breaks)."""

    your_name = Text(required=True, data_key="yourName")
    your_email = Email(required=True, data_key="yourEmail")
    your_phone = Phone(required=True, data_key="yourPhone")
    business_name = Text(required=True, data_key="businessName")
    business_branch = Text(required=True, data_key="businessBranch")
    vote_body = LongText(required=True, data_key="voteBody")


class BtobSubmission(VoteSubmission):
    your_business = Text(required=True, data_key="yourBusiness")


class BtocSubmission(VoteSubmission):
    pass


class EmployerSubmission(VoteSubmission):
    your_position = Text(required=True, data_key="yourPosition")
    employer = Slug()  # optional: else the employer whose name equals businessName


class VoteIn(EmployerSubmission):
    """A vote entered by staff (e.g. from paper): the employer type's fields and moderation."""

    active = Bool(load_default=False)
    employer = Slug(allow_none=True)


class VoteTarget(BaseSchema):
    id = fields.UUID(required=True)


class VoteUpdate(all_optional(VoteIn, "VoteChanges"), VoteTarget):
    """Moderation: `id` names the vote; every other field is optional."""


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


class PublicVoteOut(VoteOut):
    """A vote as everyone else sees it: no way to reach the person who wrote it."""

    class Meta:
        exclude = ("your_email", "your_phone", "redacted")


class VoteListArgs(ListArgs):
    employer = Slug()
    active = QueryBool()
