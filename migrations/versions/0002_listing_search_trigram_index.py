"""Trigram index for listing search (PostgreSQL)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Search matches every word as a substring of listings.search_text (LIKE '%word%'); a GIN
trigram index answers that without reading every row. SQLite has no pg_trgm; there the
query stays the same and scans the location's rows.
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.create_index(
        "ix_listings_search_text_trgm",
        "listings",
        ["search_text"],
        postgresql_using="gin",
        postgresql_ops={"search_text": "gin_trgm_ops"},
    )


def downgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index("ix_listings_search_text_trgm", table_name="listings")
