"""The statements that find a list's page, built once and fast however deep the page.

A deferred join (the page's ids from the index alone, then only those rows loaded), rows
written as their output by the database for hot lists (`Encoded`), the count in the same
statement where it costs nothing more, and keyset starts remembered for pages asked again
(`PAGE_STARTS`). `paginate` is the one entry: it answers a `Page` of the list contract
(pagination.py).
"""

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from marshmallow import Schema
from sqlalchemy import Select, asc, bindparam, desc, func, select, true, tuple_, type_coerce
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.types import NullType

from . import reads
from .extensions import db
from .output import Encoded
from .pagination import MAX_SORT, Page
from .recent import RecentlyUsed, request_key
from .sql import among_bound, json_of, json_text

# The statement of a page's rows as their output (`Encoded`), given the page's ids (a
# SELECT, or BOUND_IDS) and the ORDER BY clauses.
Encode = Callable[[Any, list[Any]], Select]


def encoded_by_id(output: Select, id_column: Any) -> Encode:
    """The `Encode` of a hot list: `output` (each row's output, `sql.json_of`, as its first
    column) of the rows whose `id_column` is among the page's ids, in the page's order,
    with the sort's columns (where the next page starts)."""

    def statement(ids: Any, order: list[Any]) -> Select:
        keys = sort_keys(order)
        stmt = output.add_columns(*(as_stored(c) for c in (keys[0] if keys else ())))
        return stmt.where(among(id_column, ids)).order_by(*order)

    return statement


def paginate(
    stmt: Select,
    args: dict[str, Any],
    *,
    default_order: Sequence[Any] = (),
    tiebreak: Any = None,
    options: Sequence[Any] = (),
    total: int | None = None,
    encoded: Encode | None = None,
    count_with_page: bool = False,
    revision: tuple[Hashable, ...] | None = None,
    params: Mapping[str, Any] | None = None,
    located: Select | None = None,
) -> Page:
    """One page of `stmt`, in the order `args["sort"]` asks (else `default_order`).

    Ties break on `tiebreak` (the entity's id by default), so pages never overlap or skip.
    `options` are loader options (eager loads) for the page's rows. `total`, when the
    caller knows it (a stored count), saves the COUNT(*). `encoded(page_ids, order)`, for
    hot lists, is the statement of the page's rows as their output (`Encoded`).
    `count_with_page` counts in the statement that finds the page's ids, for lists whose
    every match is read to order them anyway (a search by relevance): one pass, not two.
    `revision`, what determines the list's rows (a stored revision), lets the process
    remember where pages start (`PAGE_STARTS`): a page asked again, or the one after a page
    it answered, starts at its first row's sort key instead of skipping every row before.

    `params`: `stmt` is built once, its values bind parameters given here, so the page's
    statements are built once per sort and kept (`STATEMENTS`), not built (and their cache
    keys computed) for every request.

    `located`, for a first page whose list is the path's location's (and `encoded`): a
    one-row SELECT of that location with what the read needs, its list's total among it
    (`total`), whose columns come with each of the page's rows: the page and its location
    in one statement, one round trip. The page's `located` holds that row's values, in
    order (None when the page has no rows: the caller finds the location alone).
    """
    page, per_page = args["page"], args["per_page"]
    order = args.get("sort") or default_order
    start = None
    if revision is not None and page > 1:  # page 1 starts at the start
        start = PAGE_STARTS.get(request_key(*revision, page, skip_arg="page"))
    # A list built once, in a sort named by its text: its statements are built once.
    shape = (stmt, getattr(order, "text", None), start and start[1], count_with_page, located)
    reused = params is not None and shape[1] is not None
    built = STATEMENTS.get(shape) if reused else None
    if built is None:
        built = page_statements(
            stmt,
            order,
            tiebreak=tiebreak,
            options=options,
            encoded=encoded,
            start=start,
            ids_bound=count_with_page,
            located=located,
        )
        if reused:
            STATEMENTS.put(shape, built)
    values = {**(params or {}), "page_limit": per_page}
    if built.from_start:
        values.update(zip(START_NAMES, start[0], strict=False))
    else:
        values["page_offset"] = (page - 1) * per_page
    if total is None and count_with_page:
        found, total = rows_and_count(built.ids, values)
        if total is None:  # past the last page
            return Page([], page, per_page, reads.scalar(built.count, values))
        values["page_ids"] = [row[0] for row in found]
    if located is not None:
        rows = load_rows(built.rows, values, True)
        if not rows:
            return Page(rows, page, per_page, 0)
        first = rows[0]
        found = tuple(first[-len(located.selected_columns) :])
        return Page(rows, page, per_page, first.located_total or 0, located=found)
    # ORM objects come through the session: loaded first, they leave it the connection that
    # the count then uses too (one checkout, not a Core read's and then the session's).
    rows = load_rows(built.rows, values, encoded is not None)
    if total is None:
        total = reads.scalar(built.count, values)
    if revision is not None and built.keys is not None and rows:
        # Page 1 starts at the start; a page found from its start has it remembered.
        remember_starts(
            built.keys,
            revision,
            page,
            rows,
            this=page > 1 and not built.from_start,
            following=len(rows) == per_page,
        )
    return Page(rows, page, per_page, total)


# The statements of pages of lists built once (paginate's `params`), by list and sort.
STATEMENTS = RecentlyUsed(size=512, lifetime=False)
START_NAMES = tuple(f"page_start_{i}" for i in range(MAX_SORT + 1))


class PageStatements(NamedTuple):
    """The statements of a page of a list, their values bind parameters."""

    # The page's ids: `page_limit` from `page_offset`, or from its start (with the list's
    # `_total` when it is counted with the page).
    ids: Select
    rows: Select  # its rows: by `ids`, or by the list of ids bound as `page_ids`
    count: Select  # how many rows the list has
    keys: tuple[list[Any], bool] | None  # the sort's columns (`sort_keys`)
    from_start: bool  # `ids` starts at the sort key bound as `page_start_0`, …


def page_statements(
    stmt: Select,
    order: Sequence[Any],
    *,
    tiebreak: Any,
    options: Sequence[Any],
    encoded: Encode | None,
    start: tuple[Any, bool] | None,
    ids_bound: bool,
    located: Select | None = None,
) -> PageStatements:
    entity = stmt.column_descriptions[0].get("entity")  # None: a SELECT of columns
    tiebreak = entity.id if tiebreak is None else tiebreak
    clauses = [*order, tiebreak.asc()]
    keys = sort_keys(clauses)
    from_start = start is not None and keys is not None
    # A deferred join: the page's ids come from the index alone (cheap even deep in a
    # long list), then only those rows are loaded, with what the output shows.
    page_ids = (
        stmt.with_only_columns(tiebreak, maintain_column_froms=True)
        .order_by(*clauses)
        .limit(bindparam("page_limit"))
    )
    if from_start:
        page_ids = page_ids.where(start_at(keys, inclusive=start[1], stored=encoded is not None))
    else:
        page_ids = page_ids.offset(bindparam("page_offset"))
    rows = rows_statement(
        entity, tiebreak, BOUND_IDS if ids_bound else page_ids, clauses, options, encoded
    )
    if ids_bound:
        page_ids = with_total(page_ids) if from_start else counted_once(page_ids, clauses)
    if located is not None:  # named apart from the page's columns (`id`, a sort key)
        one = located.offset(0).subquery()
        rows = rows.add_columns(*(c.label(f"located_{c.key}") for c in one.c)).join(one, true())
    return PageStatements(page_ids, rows, counting(stmt), keys, from_start)


# The page's ids found by a statement of their own, bound as a list (`sql.among_bound`).
BOUND_IDS = bindparam("page_ids")


def among(column: Any, ids: Any) -> Any:
    """`column` among `ids`: a SELECT's, or those bound (`BOUND_IDS`)."""
    return among_bound(column, ids) if ids is BOUND_IDS else column.in_(ids)


def rows_statement(
    entity: Any,
    tiebreak: Any,
    ids: Any,
    clauses: list[Any],
    options: Sequence[Any],
    encoded: Encode | None,
) -> Select:
    """The statement of the rows with these ids (a SELECT, or BOUND_IDS), in `clauses`
    order: their output (`encoded`), or ORM objects with `options`."""
    if encoded is not None:
        return encoded(ids, clauses)
    return select(entity).where(among(tiebreak, ids)).options(*options).order_by(*clauses)


def counting(stmt: Select) -> Select:
    """COUNT(*) over `stmt`'s FROM and WHERE (no subquery that would carry every column)."""
    return stmt.with_only_columns(func.count(), maintain_column_froms=True).order_by(None)


def with_total(page: Select) -> Select:
    """`page` (a LIMIT/OFFSET of a list) with how many rows the list has, counted in the
    same statement: `_total`, count(*) OVER ()."""
    return page.add_columns(func.count().over().label("_total"))


def counted_once(page_ids: Select, clauses: list[Any]) -> Select:
    """`page_ids` (a LIMIT/OFFSET in `clauses` order) with how many rows its list has
    (`_total`), for a list whose every row is read to order it anyway (a search by
    relevance): each row's id and sort values kept once (a CTE named twice, which both
    databases then compute once), counted, and the page taken from them. `with_total`'s
    count(*) OVER () beside an ORDER BY costs SQLite a pass more over the rows (a search's
    statement on bench/run.py's data: 8.63 → 7.70 M instructions); PostgreSQL takes as long
    either way. An order that is not each clause ascending or descending (NULLS FIRST or
    LAST, say) keeps `with_total`: NULLs sort here as each database's default puts them,
    as they did in `page_ids`. Computed once is their planners' choice for a CTE named
    twice (PostgreSQL's since 12, SQLite's since 3.35), not pinned with `MATERIALIZED`,
    which PostgreSQL before 12 does not parse; the answers are the same either way."""
    sorts = [sort_of(clause) for clause in clauses]
    if None in sorts:
        return with_total(page_ids)
    matched = (
        page_ids.limit(None)
        .offset(None)
        .order_by(None)
        .add_columns(*(value.label(f"sort_{i}") for i, (value, _) in enumerate(sorts)))
        .cte("matched")
    )
    ordered = (way(matched.c[f"sort_{i}"]) for i, (_, way) in enumerate(sorts))
    total = select(func.count()).select_from(matched).scalar_subquery()
    return (
        select(matched.c[0], total.label("_total"))
        .order_by(*ordered)
        .limit(bindparam("page_limit"))
        .offset(bindparam("page_offset"))
    )


DIRECTIONS = {operators.asc_op: asc, operators.desc_op: desc}


def sort_of(clause: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """What an ORDER BY clause sorts by and which way: `x ASC`, `x DESC`, or a bare `x`
    (ascending, as a relevance CASE is given); None for any other modifier."""
    way = DIRECTIONS.get(getattr(clause, "modifier", None))
    if way is not None:
        return clause.element, way
    return None if isinstance(clause, UnaryExpression) else (clause, asc)


def rows_and_count(
    page: Select, params: Mapping[str, Any] | None = None
) -> tuple[list[Any], int | None]:
    """The rows of `page` (`with_total`) and how many the list has; None past its last page
    (none to count on)."""
    found = reads.rows(page, params)
    return found, (found[0]._total if found else None)


# Where recently answered pages of revisioned lists start (recent.py): by revision, URL
# (less `page`) and page, the sort key of the page's first row, or of the row just before.
PAGE_STARTS = RecentlyUsed()


def sort_keys(clauses: list[Any]) -> tuple[list[Any], bool] | None:
    """The sort's columns and whether it is ascending, if every clause goes one way (one
    row comparison then finds a start along the index); else None."""
    directions = {getattr(clause, "modifier", None) for clause in clauses}
    if len(directions) != 1 or directions.pop() not in (operators.asc_op, operators.desc_op):
        return None
    return [clause.element for clause in clauses], clauses[0].modifier is operators.asc_op


def as_stored(column: Any) -> Any:
    """A sort column of an encoded page's rows as the driver reads it, not converted by its
    type (a UUID's text on SQLite): only the page's last row's is ever used, as the next
    page's start, bound again as it was read (`start_at`'s `stored`)."""
    return type_coerce(column, NullType()).label(column.key)


def start_at(keys: tuple[list[Any], bool], *, inclusive: bool, stored: bool = False) -> Any:
    """The rows from (or after) the row whose sort key is bound as `page_start_0`, …: values
    of the columns' types, or (`stored`) as the driver read them (`as_stored`)."""
    columns, ascending = keys
    row = tuple_(*columns)
    anchor = tuple_(
        *(
            bindparam(name, type_=NullType() if stored else c.type)
            for name, c in zip(START_NAMES, columns, strict=False)
        )
    )
    if ascending:
        return row >= anchor if inclusive else row > anchor
    return row <= anchor if inclusive else row < anchor


def remember_starts(
    keys: tuple[list[Any], bool],
    revision: tuple[Hashable, ...],
    page: int,
    rows: Sequence[Any],
    *,
    this: bool,
    following: bool,
) -> None:
    """This page starts at its first row; the next one after its last."""
    columns = keys[0]
    first = sort_key(rows[0], columns) if this else None
    if first is not None:
        PAGE_STARTS.put(request_key(*revision, page, skip_arg="page"), (first, True))
    last = sort_key(rows[-1], columns) if following else None
    if last is not None:
        PAGE_STARTS.put(request_key(*revision, page + 1, skip_arg="page"), (last, False))


def sort_key(row: Any, columns: list[Any]) -> tuple[Any, ...] | None:
    """A row's values of the sort's columns (a plain row or an ORM object); None if one is
    NULL (NULLs sort differently on each database: those pages skip rows)."""
    values = tuple(row[c.key] if isinstance(row, Mapping) else getattr(row, c.key) for c in columns)
    return None if None in values else values


def load_rows(stmt: Select, params: Mapping[str, Any] | None, encoded: bool) -> Sequence[Any]:
    """The rows `stmt` selects: each one's output (`Encoded`), or ORM objects."""
    if encoded:
        return Encoded(reads.rows(stmt, params))
    return list(db.session.scalars(stmt, params).unique())


def small_page(model: Any, args: dict[str, Any], schema: Schema) -> Page:
    """A page of a small table whose output (`schema`) shows only its own columns (a
    reference list): the rows as their output, written by the database, and their count,
    in one statement built once per sort. No deferred join: the table fits in a few pages."""
    table = model.__table__
    page, per_page, order = args["page"], args["per_page"], args["sort"]
    shape = (table, order.text, "small")
    stmt = STATEMENTS.get(shape)
    if stmt is None:
        stmt = with_total(
            select(json_text(json_of(schema, table.c)))
            .order_by(*order, table.c.id.asc())
            .limit(bindparam("page_limit"))
            .offset(bindparam("page_offset"))
        )
        STATEMENTS.put(shape, stmt)
    found, total = rows_and_count(
        stmt, {"page_limit": per_page, "page_offset": (page - 1) * per_page}
    )
    if total is None:  # past the last page
        return Page([], page, per_page, reads.scalar(counting(select(table))))
    return Page(Encoded(found), page, per_page, total)


def every_row(
    stmt: Select,
    args: dict[str, Any],
    *,
    default_order: Sequence[Any] = (),
    options: Sequence[Any] = (),
    batch: int = 500,
) -> Iterator[Sequence[Any]]:
    """Every row of `stmt` in the order `args["sort"]` asks, batch by batch, as ORM objects
    (an export whose cells Python writes: the votes', whose personal data it decrypts): the
    ids stream from the database, and only one batch of rows is loaded at a time."""
    entity = stmt.column_descriptions[0]["entity"]
    clauses = [*(args.get("sort") or default_order), entity.id.asc()]
    ids = db.session.scalars(
        stmt.with_only_columns(entity.id, maintain_column_froms=True)
        .order_by(*clauses)
        .execution_options(yield_per=batch)
    )
    rows = rows_statement(entity, entity.id, BOUND_IDS, clauses, options, None)
    for chunk in ids.partitions(batch):
        yield load_rows(rows, {"page_ids": list(chunk)}, False)


def every_line(
    stmt: Select, params: Mapping[str, Any], *, batch: int = 500
) -> Iterator[Sequence[str]]:
    """Every text `stmt` selects (a CSV line each: `sql.csv_lines_of`), batch by batch from
    one statement whose rows stream (a server-side cursor on PostgreSQL), so an export's
    memory stays flat whatever its number of rows."""
    yield from (
        db.session.execute(stmt.execution_options(yield_per=batch), params).scalars().partitions()
    )
