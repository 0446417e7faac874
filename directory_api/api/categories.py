"""/categories: two levels (categories and their subcategories); anyone reads, supers write."""

from typing import Any

from flask import Blueprint
from sqlalchemy import Select, select
from sqlalchemy.orm import joinedload

from ..access import require_super
from ..bodies import load_body
from ..errors import invalid
from ..extensions import db
from ..models import Business, Category, Employer
from ..openapi import spec
from ..schemas.base import TargetSchema
from ..schemas.categories import CategoryIn, CategoryListArgs, CategoryOut, CategoryUpdate
from ..search import refresh_search_of_subcategory
from .common import by_slug_or_422, find_target, id_by_slug, refuse_if_used
from .resources import create_named, delete_unused, register_reads, update_named

bp = Blueprint("categories", __name__, url_prefix="/categories")

category_out = CategoryOut()


def resolve_parent(slug: str | None, category: Category | None = None) -> Category | None:
    """The parent named by `slug`: an existing top-level category other than `category`."""
    if slug is None:
        return None
    parent = by_slug_or_422(Category, slug, "parent")
    if parent.parent_id is not None:
        invalid("parent", "A subcategory cannot have subcategories of its own.")
    if category is not None:
        if parent.id == category.id:
            invalid("parent", "A category cannot be its own parent.")
        if db.session.scalar(select(Category.id).where(Category.parent_id == category.id).limit(1)):
            invalid("parent", "This category has subcategories, so it cannot become one.")
    return parent


def listings_using(category: Category) -> dict[str, Any]:
    return {
        "businesses": select(Business.id).where(Business.subcategory_id == category.id),
        "employers": select(Employer.id).where(Employer.subcategory_id == category.id),
    }


def filter_categories(stmt: Select, args: dict[str, Any]) -> Select:
    if "parent" in args:
        stmt = stmt.where(Category.parent_id == id_by_slug(Category, args["parent"]))
    if "top_level" in args:
        is_top = Category.parent_id.is_(None)
        stmt = stmt.where(is_top if args["top_level"] else ~is_top)
    return stmt


register_reads(
    bp,
    Category,
    CategoryOut,
    what="category",
    list_args=CategoryListArgs,
    filters=filter_categories,
    options=(joinedload(Category.parent),),
)


@bp.post("/")
@require_super
@spec(body=CategoryIn, response=CategoryOut, status=201, conflicts=True, not_found=True)
def create_category():
    """Create a category, or a subcategory when `parent` names a top-level category."""
    data = load_body(CategoryIn())
    data["parent"] = resolve_parent(data.get("parent"))
    return create_named(Category, category_out, data)


@bp.put("/")
@require_super
@spec(body=CategoryUpdate, response=CategoryOut, conflicts=True, not_found=True)
def update_category():
    """Change the category named in the body by `id` or current `slug`."""
    data = load_body(CategoryUpdate())
    category = find_target(Category, data, what="category")
    if "parent" in data:
        data["parent"] = resolve_parent(data["parent"], category)
        if data["parent"] is None and category.parent_id is not None:
            # Businesses and employers may only use subcategories.
            refuse_if_used("subcategory", listings_using(category))
    # Listings search their subcategory's name: a rename reaches them in the same commit.
    refresh = (lambda: refresh_search_of_subcategory(category)) if "name" in data else None
    return update_named(category, category_out, data, also=refresh)


@bp.delete("/")
@require_super
@spec(body=TargetSchema, status=204, conflicts=True, not_found=True)
def delete_category():
    """Delete the category named in the body, unless something still uses it."""
    category = find_target(Category, load_body(TargetSchema()), what="category")
    subcategories = select(Category.id).where(Category.parent_id == category.id)
    uses = {"subcategories": subcategories, **listings_using(category)}
    return delete_unused(category, "category", uses)
