"""Scope the PostgreSQL search index by location and kind

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

0002's trigram index covered every listing, so a common word matched rows of every
location before the location filter applied (tens of thousands at 1M listings). With
btree_gin, one GIN index holds location, kind and the trigrams, and a search reads only
the posting lists of its own location.
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.create_index(
        "ix_listings_search_trgm",
        "listings",
        ["location_id", "kind", "search_text"],
        postgresql_using="gin",
        postgresql_ops={"search_text": "gin_trgm_ops"},
    )
    op.drop_index("ix_listings_search_text_trgm", table_name="listings")


def downgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index(
        "ix_listings_search_text_trgm",
        "listings",
        ["search_text"],
        postgresql_using="gin",
        postgresql_ops={"search_text": "gin_trgm_ops"},
    )
    op.drop_index("ix_listings_search_trgm", table_name="listings")
