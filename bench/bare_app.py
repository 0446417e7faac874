"""The ceiling of issue 19: a separate, minimal Flask app answering the same 20-item page.

No extensions, no hooks, no database: what Flask itself costs for this answer. It is a
process (or, for instruction counts, an app) of its own, so the service's per-request
plumbing is not hidden in the ceiling, as it was in /bench/bare inside the service.
"""

from flask import Flask, jsonify

ITEMS = [
    {
        "id": f"00000000-0000-4000-8000-{number:012d}",
        "createdAt": "2026-11-22T08:00:00.000Z",
        "updatedAt": "2026-11-22T08:00:00.000Z",
        "slug": f"item-{number}",
        "name": f"Item {number}",
        "description": "A representative description of about this length.",
        "subcategory": "cafes",
        "branch": None,
        "email": None,
        "phone": None,
        "address": None,
        "website": None,
        "socials": [{"social": "instagram", "url": f"https://instagram.com/item{number}"}],
    }
    for number in range(20)
]

app = Flask(__name__)


@app.get("/items/")
def items():
    return jsonify({"items": ITEMS, "page": 1, "perPage": 20, "total": 20})
