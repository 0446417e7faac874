"""Small answers several endpoints share."""

from marshmallow import Schema, fields

from .fields import QueryBool


class StatusOut(Schema):
    status = fields.String(required=True)


class DetailOut(Schema):
    detail = fields.String(required=True)


class ReceivedOut(Schema):
    id = fields.UUID(required=True)
    status = fields.String(required=True, metadata={"enum": ["received"]})


class ReadyOut(StatusOut):
    checks = fields.Dict(keys=fields.String(), values=fields.String(), required=True)


class ImportArgs(Schema):
    dry_run = QueryBool(
        data_key="dryRun",
        load_default=False,
        metadata={"description": "Validate every row and count, writing nothing."},
    )


class ImportOut(Schema):
    created = fields.Integer(required=True)
    updated = fields.Integer(required=True)  # rows of existing listings that change something
    unchanged = fields.Integer(required=True)  # rows of existing listings that change nothing
    dry_run = fields.Boolean(required=True, data_key="dryRun")


class IndexOut(Schema):
    name = fields.String(required=True)
    version = fields.String(required=True)
    docs = fields.String(required=True, metadata={"description": "Interactive documentation."})
    openapi = fields.String(required=True, metadata={"description": "The OpenAPI document."})
