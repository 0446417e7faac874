"""The revision of each location's list of businesses and of employers

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24

A random number that turns with every change a list or search page of those listings
shows; a page's ETag, once known for a revision, answers a revalidation (304) before the
page's work (issue 19). Existing rows start at 0: no running process knows a tag yet.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("listing_counts") as batch:
        batch.add_column(sa.Column("revision", sa.BigInteger(), server_default="0", nullable=False))


def downgrade():
    with op.batch_alter_table("listing_counts") as batch:
        batch.drop_column("revision")
