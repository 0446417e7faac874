"""Maintained listing counts per location and kind

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

The unfiltered business/employer list reads its total here instead of counting every row
of a large location on each request. The ORM keeps it up to date on insert and delete;
`flask listings recount` recomputes it after bulk loads.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "listing_counts",
        sa.Column("location_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["location_id"], ["locations.id"],
            name=op.f("fk_listing_counts_location_id_locations"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("location_id", "kind", name=op.f("pk_listing_counts")),
    )
    op.execute(
        "INSERT INTO listing_counts (location_id, kind, total) "
        "SELECT location_id, kind, count(*) FROM listings GROUP BY location_id, kind"
    )


def downgrade():
    op.drop_table("listing_counts")
