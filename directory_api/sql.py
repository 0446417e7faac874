"""SQL that PostgreSQL and SQLite spell differently, as constructs each compiles its own way.

`json_list(json_object(...), order)` is the JSON array of one object per row, in `order`:
a list page's social links come in the page's own statement (one round trip, not two).
"""

from typing import Any

from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import JSON


class json_object(FunctionElement):  # lower case: a SQL function
    """A JSON object of alternating keys and values."""

    type = JSON()
    inherit_cache = True


class json_list(FunctionElement):
    """The JSON array of its first argument over the rows, ordered by its second (NULL or
    `[]` when there are none). Aggregate the rows of a subquery ordered the same way:
    SQLite before 3.44 has no ORDER BY inside an aggregate, and aggregates the rows in the
    order its subquery gives them (an aggregate's ordered subquery is never flattened)."""

    type = JSON()
    inherit_cache = True


@compiles(json_object, "postgresql")
def _postgresql_object(element: json_object, compiler: Any, **kw: Any) -> str:
    return f"json_build_object({compiler.process(element.clauses, **kw)})"


@compiles(json_object)
def _sqlite_object(element: json_object, compiler: Any, **kw: Any) -> str:
    return f"json_object({compiler.process(element.clauses, **kw)})"


@compiles(json_list, "postgresql")
def _postgresql_list(element: json_list, compiler: Any, **kw: Any) -> str:
    value, order = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"json_agg({value} ORDER BY {order})"


@compiles(json_list)
def _sqlite_list(element: json_list, compiler: Any, **kw: Any) -> str:
    value = compiler.process(element.clauses.clauses[0], **kw)
    return f"json_group_array(json({value}))"
