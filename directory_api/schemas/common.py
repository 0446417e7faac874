"""Small answers several endpoints share."""

from marshmallow import Schema, fields


class StatusOut(Schema):
    status = fields.String(required=True)


class DetailOut(Schema):
    detail = fields.String(required=True)


class ReceivedOut(Schema):
    id = fields.UUID(required=True)
    status = fields.String(required=True, metadata={"enum": ["received"]})


class ReadyOut(StatusOut):
    checks = fields.Dict(keys=fields.String(), values=fields.String(), required=True)
