"""JSON in and out through orjson: fast, UTF-8 only, no NaN, nesting capped (a 400, not a 500).

`json_response` is how every JSON answer is written, whatever its kind (`jsonify` and
Flask's own answers through the provider, problems through errors.py): one encoder, one
spelling, on every database and path."""

from typing import Any

import orjson
from flask import Response
from flask.json.provider import JSONProvider as BaseJSONProvider

OPTIONS = orjson.OPT_NON_STR_KEYS


def json_response(body: Any, status: int = 200, mimetype: str = "application/json") -> Response:
    return Response(orjson.dumps(body, option=OPTIONS), status=status, mimetype=mimetype)


class JSONProvider(BaseJSONProvider):
    mimetype = "application/json"

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return orjson.dumps(obj, option=OPTIONS).decode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        # orjson raises JSONDecodeError (a ValueError, which Flask answers with 400) for
        # bytes that are not UTF-8, for NaN, and for nesting deeper than 1024 levels.
        return orjson.loads(s)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        return json_response(self._prepare_response_obj(args, kwargs))
