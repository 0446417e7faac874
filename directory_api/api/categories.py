"""/categories: two levels (categories and their subcategories); anyone reads, supers write."""

import uuid
from typing import Any

from flask import Blueprint
from sqlalchemy import Select, select
from sqlalchemy.orm import joinedload

from ..endpoints import Access, endpoint
from ..models import Business, Category, Employer
from ..models.api_token import Scope
from ..platform.errors import invalid
from ..platform.extensions import db
from ..platform.page_queries import paginate
from ..platform.pagination import sort_fields
from ..schemas.base import TargetSchema
from ..schemas.categories import CategoryIn, CategoryListArgs, CategoryOut, CategoryUpdate
from ..search import refresh_search_of_subcategory
from .changes import create_named, delete_unused, refuse_if_used, update_named
from .lookups import by_slug_or_422, find_target, get_or_404, id_by_slug, named_by_path

bp = Blueprint("categories", __name__, url_prefix="/categories")


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


CategoryArgs = CategoryListArgs.sorted_by(sort_fields(Category), default="name")
# What the output shows, loaded with the page.
WITH_PARENT = (joinedload(Category.parent),)


@bp.get("/", endpoint="list")
@endpoint(response=CategoryOut, query=CategoryArgs, paged=True)
def list_categories(args):
    """List categories and subcategories (paged, sortable; filter by `parent`, `topLevel`)."""
    return paginate(filter_categories(select(Category), args), args, options=WITH_PARENT)


@bp.get("/slug/<slug:item_slug>", endpoint="get_by_slug")
@bp.get("/id/<uuid:item_id>", endpoint="get_by_id")
@endpoint(response=CategoryOut)
def get_category(item_slug: str | None = None, item_id: uuid.UUID | None = None):
    """Get one category by slug or by id."""
    found_by = named_by_path(Category, item_slug, item_id)
    return get_or_404(Category, found_by, what="category", options=WITH_PARENT)


@bp.post("/")
@endpoint(
    CategoryIn,
    CategoryOut,
    status=201,
    access=Access.SUPER,
    scope=Scope.DIRECTORY_WRITE,
    conflicts=True,
    not_found=True,
)
def create_category(data):
    """Create a category, or a subcategory when `parent` names a top-level category."""
    data["parent"] = resolve_parent(data.get("parent"))
    return create_named(Category, data)


@bp.put("/")
@endpoint(
    CategoryUpdate,
    CategoryOut,
    access=Access.SUPER,
    scope=Scope.DIRECTORY_WRITE,
    conflicts=True,
    not_found=True,
)
def update_category(data):
    """Change the category named in the body by `id` or current `slug`."""
    category = find_target(Category, data, what="category")
    if "parent" in data:
        data["parent"] = resolve_parent(data["parent"], category)
        if data["parent"] is None and category.parent_id is not None:
            # Businesses and employers may only use subcategories.
            refuse_if_used("subcategory", listings_using(category))
    # Listings search their subcategory's name: a rename reaches them in the same commit.
    refresh = (lambda: refresh_search_of_subcategory(category)) if "name" in data else None
    return update_named(category, data, also=refresh)


@bp.delete("/")
@endpoint(
    TargetSchema,
    status=204,
    access=Access.SUPER,
    scope=Scope.DIRECTORY_WRITE,
    conflicts=True,
    not_found=True,
)
def delete_category(target):
    """Delete the category named in the body, unless something still uses it."""
    category = find_target(Category, target, what="category")
    subcategories = select(Category.id).where(Category.parent_id == category.id)
    uses = {"subcategories": subcategories, **listings_using(category)}
    return delete_unused(category, "category", uses)
