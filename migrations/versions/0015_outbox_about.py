"""Outbox messages name what they are about

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26

A vote's receipt holds the voter's address; once the vote is withdrawn or deleted, its
messages go with it (issue 28, API.md 8). `about` names the vote ("vote:<id>"). Receipts
queued before this have none: they leave with the outbox's retention, as before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("about", sa.String(length=64), nullable=True))
        batch.create_index("ix_outbox_about", ["about"], unique=False)


def downgrade():
    with op.batch_alter_table("outbox") as batch:
        batch.drop_index("ix_outbox_about")
        batch.drop_column("about")
