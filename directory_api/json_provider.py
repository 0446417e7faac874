"""JSON in and out. Input is UTF-8 only, and nesting too deep to parse is a 400, not a 500."""

from typing import Any

from flask.json.provider import DefaultJSONProvider


class JSONProvider(DefaultJSONProvider):
    sort_keys = False
    ensure_ascii = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            if isinstance(s, bytes | bytearray):
                s = s.decode("utf-8")  # json.loads would also guess UTF-16 and UTF-32
            return super().loads(s, **kwargs)
        except RecursionError as error:
            # Flask answers a ValueError from here with 400 Bad Request.
            raise ValueError("JSON nested too deeply") from error
