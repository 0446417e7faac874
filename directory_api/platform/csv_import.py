"""CSV import (API.md 11): a body of rows, read into the shape a JSON body would have, so
the same marshmallow schemas validate a CSV row and a JSON body.

A header row names the columns (the JSON field names; `id`, `createdAt` and `updatedAt`, as
an export has them, are accepted and ignored). A cell is text as JSON would send it, with
two readings undone: the `'` an export puts before a cell starting with `=`, `+`, `-` or
`@`, and a list of objects written as `a:b` pairs separated by spaces (socials). Every
problem of every row is collected, keyed `row N` (1-based, the header not counted), before
anything is written.
"""

import csv
import io
from typing import Any

from marshmallow import Schema, fields

from .csv_export import unguarded
from .errors import abort

MAX_ROWS = 10_000
IGNORED_COLUMNS = frozenset({"id", "createdAt", "updatedAt"})


def row_key(number: int) -> str:
    return f"row {number}"


def cell_value(text: str, field: fields.Field) -> Any:
    """A cell as a JSON body would carry the value of `field`."""
    text = unguarded(text)  # the guard an export puts there
    inner = getattr(field, "inner", None)
    if isinstance(inner, fields.Nested):
        names = [f.data_key or n for n, f in inner.schema.load_fields.items()]
        pairs = [part.partition(":") for part in text.split()]
        return [{names[0]: key, names[1]: value} for key, _, value in pairs]
    return text


def read_rows(text: str, schema: Schema) -> tuple[list[str], list[dict[str, Any]], dict]:
    """The header, each row as a JSON-shaped dict (only its columns) and the problems found
    so far (rows whose cells do not match the header). 422 for a body that is not CSV or
    names unknown columns; 413 past MAX_ROWS rows."""
    try:
        records = [record for record in csv.reader(io.StringIO(text, newline="")) if record]
    except csv.Error as error:
        abort(422, "The request body is not valid CSV.", errors={"body": [str(error)]})
    if not records:
        abort(422, "The CSV is empty.", errors={"header": ["The first line names the columns."]})
    header, rows = [name.strip() for name in records[0]], records[1:]
    if len(rows) > MAX_ROWS:
        abort(413, f"At most {MAX_ROWS} rows per import; this one has {len(rows)}.")
    known = {field.data_key or name: field for name, field in schema.load_fields.items()}
    problems = [
        f"Unknown column {name!r}."
        for name in header
        if name not in known | dict.fromkeys(IGNORED_COLUMNS)
    ]
    problems += [
        f"Column {name!r} appears twice." for name in set(header) if header.count(name) > 1
    ]
    if problems:
        allowed = ", ".join([*known, *sorted(IGNORED_COLUMNS)])
        abort(
            422,
            f"The header names columns this import does not take ({allowed}).",
            errors={"header": problems},
        )
    values: list[dict[str, Any]] = []
    errors: dict[str, Any] = {}
    for number, record in enumerate(rows, 1):
        if len(record) != len(header):
            errors[row_key(number)] = {
                "_row": [f"{len(record)} cells; the header has {len(header)}."]
            }
            values.append({})
            continue
        values.append(
            {
                name: cell_value(cell, known[name])
                for name, cell in zip(header, record, strict=True)
                if name not in IGNORED_COLUMNS
            }
        )
    return header, values, errors
