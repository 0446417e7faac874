"""CSV export (API.md 11): every row a list's filters and sort select, streamed.

The columns are the output schema's JSON field names, in its order; a row is the item as
the JSON list shows it, so the two never disagree. A listing export's lines are written by
the database (`sql.csv_cells`, the schema's fields as SQL, quoted and joined by
`sql.csv_lines_of`) and go out as they come from one streaming statement
(`page_queries.every_line`); the votes export's rows
are dumped by the same schema as the list and written here (`cell`), batch by batch
(`page_queries.every_row`): either way memory stays flat whatever the number of rows, and
a test holds the two spellings to the same bytes. A cell that a spreadsheet would take for
a formula (starting with `=`, `+`, `-` or `@`) gets a leading `'`; the import takes it off
again.
"""

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from flask import Response, stream_with_context
from marshmallow import Schema

from .output import dumped, schema_instance

FORMULA_STARTS = ("=", "+", "-", "@")


def guarded(text: str) -> bool:
    """Whether an export puts a `'` before `text`: a formula's first character, after any
    number of `'` (so a value that itself starts with `'=` keeps its quote through an
    export and an import: the import takes one `'` off exactly these, `unguarded`)."""
    return text.lstrip("'").startswith(FORMULA_STARTS)


def unguarded(text: str) -> str:
    """`text` as it was before an export guarded it."""
    return text[1:] if text.startswith("'") and guarded(text) else text


FLUSH_AT = 64 * 1024  # characters buffered before a chunk goes out


def columns(schema: Schema, *, load: bool = False) -> list[str]:
    """The schema's output (or, with `load`, input) field names, as JSON spells them."""
    chosen = schema.load_fields if load else schema.dump_fields
    return [field.data_key or name for name, field in chosen.items()]


def cell(value: Any) -> str:
    """One value as CSV text: empty for null, true/false, a list of objects as their values
    joined by ":" and separated by spaces (socials: `instagram:https://…`)."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list):
        text = " ".join(
            ":".join(str(part) for part in item.values()) if isinstance(item, dict) else str(item)
            for item in value
        )
    else:
        text = str(value)
    return "'" + text if guarded(text) else text


def csv_lines(
    schema: type[Schema], batches: Iterable[Sequence[Any]], *, lines: bool = False
) -> Iterator[bytes]:
    """The CSV text, UTF-8 encoded, in chunks of about FLUSH_AT characters (the response
    passes them straight to the server, and WSGI servers take bytes only). The rows are
    objects `schema` dumps, or (`lines`) their CSV lines already, as `sql.csv_lines_of`
    writes them."""
    header = columns(schema_instance(schema))
    many = schema_instance(schema, many=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(header)
    for batch in batches:
        if lines:
            buffer.write("".join(batch))
        else:
            for item in dumped(batch, many, encode=False):
                writer.writerow([cell(item.get(name)) for name in header])
        if buffer.tell() >= FLUSH_AT:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def csv_response(
    schema: type[Schema], batches: Iterable[Sequence[Any]], filename: str, *, lines: bool = False
) -> Response:
    """A streamed `text/csv; charset=utf-8` answer of the rows in `batches` dumped with
    `schema` (or their `lines`, `csv_lines`), offered for download as `filename`."""
    response = Response(
        stream_with_context(csv_lines(schema, batches, lines=lines)),
        mimetype="text/csv",
        direct_passthrough=True,
    )
    response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
