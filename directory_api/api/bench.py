"""/bench/bare: the ceiling the benchmarks compare against (registered in bench mode only).

The same app, middleware and JSON provider, but no database and no schema: what Flask
itself costs for a 20-item JSON answer.
"""

from flask import Blueprint, jsonify

from ..endpoints import endpoint

bp = Blueprint("bench", __name__)

ITEMS = [
    {
        "id": f"00000000-0000-4000-8000-{number:012d}",
        "slug": f"item-{number}",
        "name": f"Item {number}",
        "subcategory": "cafes",
        "description": "A representative description of about this length.",
        "socials": [{"social": "instagram", "url": f"https://instagram.com/item{number}"}],
        "createdAt": "2026-11-22T08:00:00.000Z",
        "updatedAt": "2026-11-22T08:00:00.000Z",
    }
    for number in range(20)
]


@bp.get("/bench/bare")
@endpoint()
def bare():
    """A fixed 20-item JSON page (bench mode only)."""
    return jsonify({"items": ITEMS, "page": 1, "perPage": 20, "total": 20})
