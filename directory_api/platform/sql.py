"""SQL that PostgreSQL and SQLite spell differently, as constructs each compiles its own way.

`json_list(json_object(...), order)` is the JSON array of one object per row, in `order`:
a list page's social links come in the page's own statement (one round trip, not two).
`json_of(schema, sources)` is a row's output, written by the database as `schema` dumps it:
a hot read has each row's output come as JSON text, with no row processing, no dump and no
encoding of the rows in Python.
"""

from collections.abc import Callable, Mapping
from typing import Any

from marshmallow import Schema, fields, missing
from sqlalchemy import ARRAY, Select, Table, bindparam, cast, literal_column, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.visitors import iterate
from sqlalchemy.types import JSON, Boolean, Integer, NullType, String, TypeDecorator, Uuid

from .output import Timestamp
from .types import UTCDateTime


def spelled(postgresql: str, sqlite: str) -> Callable[[type], type]:
    """How each database spells a construct: a template of its compiled arguments (`{0}`,
    `{1}`, … one each; `{all}` all of them, comma-separated)."""

    def register(construct: type) -> type:
        for dialects, template in ((("postgresql",), postgresql), ((), sqlite)):

            def spell(element: Any, compiler: Any, _template: str = template, **kw: Any) -> str:
                parts = [compiler.process(clause, **kw) for clause in element.clauses]
                return _template.format(*parts, all=", ".join(parts))

            compiles(construct, *dialects)(spell)
        return construct

    return register


# Folded text (lower case throughout) holding a text, or starting with it. PostgreSQL's
# trigram index serves LIKE '%…%' (the value bound is the pattern, `%` and `_` escaped);
# SQLite's LIKE matches a pattern character by character, folding ASCII case, several times
# dearer than `instr` on a search's candidate rows (the value bound is the text itself).
@spelled("{0} LIKE {1} ESCAPE '\\'", "instr({0}, {1}) > 0")
class holds_text(FunctionElement):
    """Whether its first argument holds the second (see above)."""

    type = Boolean()
    inherit_cache = True


@spelled("{0} LIKE {1} ESCAPE '\\'", "substr({0}, 1, length({1})) = {1}")
class starts_with_text(FunctionElement):
    """Whether its first argument starts with the second (see above)."""

    type = Boolean()
    inherit_cache = True


def escape_like(text: str) -> str:
    """`%`, `_` and `\\` are literal characters in a LIKE pattern."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def text_bound(text: str, dialect: str, *, start: bool = False) -> str:
    """What `holds_text` (`start`: `starts_with_text`) binds for `text` on `dialect`."""
    if dialect == "sqlite":
        return text
    return ("" if start else "%") + escape_like(text) + "%"


class json_object(FunctionElement):  # lower case: a SQL function
    """A JSON object of alternating keys (literal identifiers) and values, written as the
    service's encoder writes JSON: no space after a colon or a comma, so an answer is the
    same bytes on either database (PostgreSQL's json_build_object writes `"key" : value`)."""

    type = JSON()
    inherit_cache = True


@compiles(json_object)
def _json_object_sqlite(element: Any, compiler: Any, **kw: Any) -> str:
    parts = [compiler.process(clause, **kw) for clause in element.clauses]
    return f"json_object({', '.join(parts)})"  # SQLite's is compact already


@compiles(json_object, "postgresql")
def _json_object_postgresql(element: Any, compiler: Any, **kw: Any) -> str:
    """`'{"key":' || value's JSON text || ',"next":' || … || '}'`, typed json (which keeps
    text as it is). to_json writes each value as json_build_object would; null is `null`."""
    parts = [compiler.process(clause, **kw) for clause in element.clauses]
    members = []
    for number, (key, value) in enumerate(zip(parts[0::2], parts[1::2], strict=True)):
        start = "{" if number == 0 else ","
        members.append(f"'{start}\"{key[1:-1]}\":'")  # key: a quoted literal identifier
        members.append(f"COALESCE(CAST(to_json({value}) AS TEXT), 'null')")
    if not members:
        return "CAST('{}' AS json)"
    return f"CAST({' || '.join(members)} || '}}' AS json)"


# SQLite before 3.44 has no ORDER BY inside an aggregate: it aggregates the rows in the
# order its subquery gives them (an aggregate's ordered subquery is never flattened). It
# joins the items' JSON texts as they are: json_group_array(json(…)) would parse each one
# again (twice the database's work for a summary of 200 employers).
# PostgreSQL's json_agg would put ", " between the items: the array is joined as text too.
@spelled(
    "CAST('[' || string_agg(CAST({0} AS TEXT), ',' ORDER BY {1}) || ']' AS json)",
    "'[' || group_concat({0}, ',') || ']'",
)
class json_list(FunctionElement):
    """The JSON array of its first argument (a JSON object) over the rows, ordered by its
    second (NULL when there are none). Aggregate the rows of a subquery ordered the same
    way."""

    type = JSON()
    inherit_cache = True


# SQLAlchemy keeps a UUID in SQLite as its 32 hex digits: one printf of its five parts (a
# `%.8s` reads the first 8 characters without a copy), not eight concatenations, each of
# which copies the text so far; NULL stays NULL (printf would write `----`).
@spelled(
    "CAST({0} AS TEXT)",
    "CASE WHEN {0} IS NOT NULL THEN printf('%.8s-%.4s-%.4s-%.4s-%s', {0}, substr({0}, 9),"
    " substr({0}, 13), substr({0}, 17), substr({0}, 21)) END",
)
class uuid_text(FunctionElement):
    """A UUID column as `str(uuid)` writes it: 8-4-4-4-12 lower-case hex digits."""

    type = String()
    inherit_cache = True


# SQLite has no UUID function: 16 random bytes, as the 32 hex digits SQLAlchemy keeps.
@spelled("gen_random_uuid()", "lower(hex(randomblob(16)))")
class random_uuid(FunctionElement):
    """A new random id for each row a statement writes (rows an INSERT … SELECT makes)."""

    type = Uuid()
    inherit_cache = True


@spelled(
    "CAST({0} AS jsonb) @> jsonb_build_array(CAST({1} AS TEXT))",
    "EXISTS (SELECT 1 FROM json_each({0}) WHERE json_each.value = {1})",
)
class json_list_has(FunctionElement):
    """Whether a JSON list of strings (its first argument) holds the second."""

    type = Boolean()
    inherit_cache = True


# SQLAlchemy keeps a timestamp in SQLite as `YYYY-MM-DD HH:MM:SS.ffffff`, here in UTC
# (types.UTCDateTime); one written without its fraction reads as .000. One printf, as a
# UUID's text above.
@spelled(
    """to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')""",
    "CASE WHEN {0} IS NOT NULL THEN printf('%.10sT%.8s.%.3sZ', {0}, substr({0}, 12),"
    " substr({0}, 21) || '000') END",
)
class timestamp_text(FunctionElement):
    """A UTC timestamp column as the API writes it (`fields.timestamp_text`): ISO 8601,
    milliseconds (cut, not rounded) and a Z."""

    type = String()
    inherit_cache = True


@spelled("CAST({0} AS TEXT)", "{0}")  # SQLite's JSON is text already
class json_text(FunctionElement):
    """A JSON value as its text, unparsed (a driver would parse PostgreSQL's `json`)."""

    type = String()
    inherit_cache = True


@spelled("{0}", "json({0})")  # to SQLite's json_object, text from a subquery is a string
class json_value(FunctionElement):
    """Text holding JSON, inside a JSON object as that JSON (not as a string)."""

    type = JSON()
    inherit_cache = True


class among_bound(FunctionElement):
    """Whether its first argument (a column) is among the list of values bound under the
    name of its second (a `bindparam`, never rendered itself): a page's rows by the ids
    its first statement found.

    PostgreSQL binds the list as one array (`= ANY`), its statement's text the same for any
    number of values. An expanding IN (SQLite's spelling here) has its text written again
    at every execution, with one placeholder per value: on a search's statement of 20 rows
    that was 0.44 M instructions a request (callgrind), a tenth of the request.

    Untyped: a Boolean would be written `… IN (…) = 1` on SQLite (no native boolean), which
    its planner cannot serve from the index (a scan of every listing)."""

    type = NullType()
    inherit_cache = True


@compiles(among_bound)
def _among_bound_expanding(element: Any, compiler: Any, **kw: Any) -> str:
    column, bound = element.clauses
    return compiler.process(column.in_(bindparam(bound.key, expanding=True)), **kw)


class ArrayText(TypeDecorator):
    """A list bound as the text of one PostgreSQL array (`{"a","b"}`, each value's text
    quoted), cast to the array's type in SQL. psycopg's own adaptation of a list asks each
    value's type in Python: that cost more than the expanding IN it would replace."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        if value is None:
            return None
        return "{" + ",".join(map(array_item, value)) + "}"


def array_item(value: Any) -> str:
    """`value`'s text as an item of a PostgreSQL array's text: quoted, `\\` and `"`
    escaped (NULL is not an id)."""
    text = str(value)
    if "\\" in text or '"' in text:
        text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


@compiles(among_bound, "postgresql")
def _among_bound_array(element: Any, compiler: Any, **kw: Any) -> str:
    column, bound = element.clauses
    values = cast(bindparam(bound.key, type_=ArrayText()), ARRAY(column.type))
    return f"{compiler.process(column, **kw)} = ANY ({compiler.process(values, **kw)})"


def refuse_dump_hooks(schema: Schema) -> None:
    """What a hook would change, SQL cannot write: refused at import."""
    if any(schema._hooks[hook] for hook in ("pre_dump", "post_dump")):
        raise TypeError(f"{type(schema).__name__}: no SQL for a schema with dump hooks")


def json_of(schema: Schema, sources: Mapping[str, Any]) -> json_object:
    """Each row's output as `schema` would dump it, written by the database as a JSON
    object (`json_text(...)` for its text).

    `sources` gives the SQL expression of each attribute the schema reads (a field's
    `attribute`, else its name). Text and integer columns are written as they are, UUIDs
    and UTC timestamps as the API writes them, and a list of nested objects is a JSON array
    the expression builds (`json_list` of `json_of`). Anything else is refused here, at
    import, rather than written differently from the dump: a hook, a field option, a column
    whose value Python decodes (encrypted text), or a field over a column of another type
    (tests hold the output equal to the dump).
    """
    refuse_dump_hooks(schema)
    pairs: list[Any] = []
    for name, field in schema.dump_fields.items():
        value = written(field, sources[field.attribute or name])
        if value is None:
            raise TypeError(
                f"{type(schema).__name__}.{name}: no SQL for {type(field).__name__} over "
                f"{sources[field.attribute or name].type!r}"
            )
        key = field.data_key or name
        if not key.isidentifier():
            raise TypeError(f"{type(schema).__name__}.{name}: a key SQL would quote: {key!r}")
        pairs += [literal_column(f"'{key}'"), value]
    if len(pairs) > MAX_ARGUMENTS:
        raise TypeError(f"{type(schema).__name__}: more fields than one SQL call takes")
    return json_object(*pairs)


MAX_ARGUMENTS = 100  # PostgreSQL's limit on a function call's arguments


def written(field: fields.Field, value: Any) -> Any:
    """How the database writes `value` as `field` dumps it; None if it cannot."""
    kind, column_type = type(field), value.type
    if field.dump_default is not missing or getattr(field, "as_string", False):
        return None
    if kind is fields.String and isinstance(column_type, String):
        return None if isinstance(column_type, TypeDecorator) else value
    if kind is fields.Integer and isinstance(column_type, Integer):
        return value
    if kind is fields.UUID and isinstance(column_type, Uuid):
        return uuid_text(value)
    if kind is Timestamp and isinstance(column_type, UTCDateTime):
        return timestamp_text(value)
    if kind is fields.List and type(field.inner) is fields.Nested and isinstance(column_type, JSON):
        return json_value(value)
    return None


# SQLite before 3.44 joins in the order its (ordered) subquery gives the rows, as json_list.
@spelled("string_agg({0}, ' ' ORDER BY {1})", "group_concat({0}, ' ')")
class spaced_list(FunctionElement):
    """The texts of its first argument over the rows, ordered by its second, separated by
    spaces (NULL when there are none): a list as one CSV cell (`csv_export.cell`)."""

    type = String()
    inherit_cache = True


@spelled("{0}", "{0}")
class never_formula(FunctionElement):
    """A text that cannot start with a formula's character (one a slug starts, say): its
    CSV cell needs no guard (`csv_cells`), and a costly one (a subquery) is not read twice."""

    type = String()
    inherit_cache = True


@spelled("{0}", "{0}")
class plain_cell(never_formula):
    """A text that needs neither a formula's guard nor CSV quotes, whatever the row: a slug
    (lower-case letters, digits and single hyphens, slugs.SLUG_REGEX)."""

    type = String()
    inherit_cache = True


# `''''` is one quote. A formula's first character, after any number of quotes: SQLite
# matches with GLOB (one, of the first character, for a text that starts with neither; the
# quotes are trimmed only for one that starts with a quote), PostgreSQL with a regular
# expression. Only a guarded text is copied (a concatenation copies).
@spelled(
    "CASE WHEN {0} ~ '^''*[-=+@]' THEN '''' || {0} ELSE {0} END",
    "CASE WHEN {0} GLOB '[=+@''-]*' AND ltrim({0}, '''') GLOB '[=+@-]*'"
    " THEN '''' || {0} ELSE {0} END",
)
class formula_guarded(FunctionElement):
    """A text as a CSV export writes it (`csv_export.guarded`): a `'` before a formula's
    first character (after any number of `'`); NULL stays NULL."""

    type = String()
    inherit_cache = True


def csv_cells(schema: Schema, sources: Mapping[str, Any]) -> list[Any]:
    """Each row's CSV cells as `csv_export.cell` writes them from `schema`'s dump, written
    by the database as texts in the schema's order (NULL for an empty cell): an export's
    rows go to the CSV writer as they come, with no dump and no work per cell in Python.

    `sources` as for `json_of`; a list of nested objects is given as its cell's text
    already (`spaced_list` of each item's values joined by `:`). A text that cannot start
    a formula (`never_formula`, a UUID, a timestamp) is written as it is, any other one
    guarded (`formula_guarded`). Anything `json_of` would refuse is refused here too."""
    refuse_dump_hooks(schema)
    cells = []
    for name, field in schema.dump_fields.items():
        source = sources[field.attribute or name]
        if type(field) is fields.List and isinstance(source.type, String):
            text = source
        elif type(field) is fields.Integer and isinstance(source.type, Integer):
            text = cast(source, String)
        else:
            text = written(field, source)
            if text is None or not isinstance(text.type, String):
                raise TypeError(
                    f"{type(schema).__name__}.{name}: no CSV cell in SQL for "
                    f"{type(field).__name__} over {source.type!r}"
                )
        if not isinstance(text, never_formula | uuid_text | timestamp_text):
            text = formula_guarded(text)
        cells.append(text.label(field.data_key or name))
    return cells


# CSV quoting as the csv module's QUOTE_MINIMAL writes it (`csv_export.csv_lines`: a comma
# between cells, lines ended by CRLF): a text holding a comma, a quote, CR or LF is quoted,
# its quotes doubled; NULL stays NULL (the line's `%s` writes it as an empty cell). One pass
# over the text to test it (a regular expression, a GLOB), a copy only for the few that
# need quotes.
@spelled(
    """CASE WHEN {0} ~ '[",\\r\\n]' THEN '"' || replace({0}, '"', '""') || '"' ELSE {0} END""",
    """CASE WHEN {0} GLOB '*[",' || char(13, 10) || ']*' THEN '"' || replace({0}, '"', '""')"""
    """ || '"' ELSE {0} END""",
)
class csv_quoted(FunctionElement):
    """A text as one CSV cell (see above)."""

    type = String()
    inherit_cache = True


@spelled("E'\\r\\n'", "char(13, 10)")
class crlf(FunctionElement):
    """The end of a CSV line."""

    type = String()
    inherit_cache = True


# printf's (PostgreSQL: format's) `%s` writes NULL as an empty text.
@spelled("format({all})", "printf({all})")
class formatted(FunctionElement):
    """Its first argument, a format of `%s` only, filled with the others."""

    type = String()
    inherit_cache = True


# Cells that hold no comma, quote or line break whatever the row (`csv_cells` writes them
# unguarded, as they are).
UNQUOTED_CELLS = (uuid_text, timestamp_text, plain_cell)
# A function takes at most 100 arguments on PostgreSQL (127 on SQLite): the format and 99.
CSV_LINE_CELLS = 99


def csv_lines_of(rows: Select, *, carry: int = 0) -> Select:
    """Each row of `rows` (a SELECT of `csv_cells`, in its order) as its whole CSV line,
    CRLF included, as the csv module writes it: the client reads one text per row, not
    one per cell, and writes the lines as they come. The first `carry` columns of `rows`
    are not cells: they come as they are, before the line.

    The rows are a subquery with OFFSET 0, which neither database merges into the line's
    statement (each cell's expression, a subquery among them, would run once per mention
    in its quoting) and both read in its own order, as it streams. The line is one
    `printf` (`format`) of its cells: a concatenation would copy the line so far once per
    cell."""
    cells = rows.offset(0).subquery()
    carried, texts = list(cells.c)[:carry], []
    for label, column in zip(
        list(rows.selected_columns)[carry:], list(cells.c)[carry:], strict=True
    ):
        plain = isinstance(getattr(label, "element", None), UNQUOTED_CELLS)
        texts.append(column if plain else csv_quoted(column))
    if len(texts) < 2:  # the csv module quotes a row's only cell when it is empty
        raise TypeError("a CSV line of one cell is the csv module's to write")
    if len(texts) > CSV_LINE_CELLS:
        raise TypeError(f"a CSV line in SQL has at most {CSV_LINE_CELLS} cells")
    line_format = literal_column("'" + ",".join(["%s"] * len(texts)) + "'") + crlf()
    return select(*carried, formatted(line_format, *texts))


def tables_read(statement: Any) -> frozenset[Table]:
    """Every table `statement` reads, in its subqueries too."""
    return frozenset(element for element in iterate(statement) if isinstance(element, Table))
