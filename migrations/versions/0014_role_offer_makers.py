"""Role offers record who made them

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25

A pending role offer works only while its maker still holds the right to make it
(issue 28, API.md 18): a super for super and owner offers, a super or an owner of the
location for admin offers. `offered_by` names the maker; an offer goes with its maker's
account. Offers that exist already have no recorded maker: they keep working until they
expire, at most 7 days after this migration.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("role_grants") as batch:
        batch.add_column(sa.Column("offered_by", sa.Uuid(), nullable=True))
        batch.create_foreign_key(
            "fk_role_grants_offered_by_users",
            "users",
            ["offered_by"],
            ["id"],
            ondelete="CASCADE",
        )
        batch.create_index("ix_role_grants_offered_by", ["offered_by"])


def downgrade():
    with op.batch_alter_table("role_grants") as batch:
        batch.drop_index("ix_role_grants_offered_by")
        batch.drop_constraint("fk_role_grants_offered_by_users", type_="foreignkey")
        batch.drop_column("offered_by")
