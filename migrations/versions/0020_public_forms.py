"""Public forms against abuse: used proof-of-work solutions, held mail

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26

A solution of a challenge is accepted once (API.md 17): without Redis, its mark is a row
of `used_once` until the challenge expires. A business vote's mail sent by what looks
like a bot is kept with the new outbox status `held` until staff release or discard it.
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

STATUSES = ("pending", "sent", "failed")


def status_check(statuses):
    listed = ", ".join(f"'{status}'" for status in statuses)
    return f"status IN ({listed})"


def upgrade():
    op.create_table(
        "used_once",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_used_once")),
    )
    op.create_index(op.f("ix_used_once_expires_at"), "used_once", ["expires_at"])
    with op.batch_alter_table("outbox") as batch:
        batch.drop_constraint(op.f("ck_outbox_outbox_status"), type_="check")
        batch.create_check_constraint(
            op.f("ck_outbox_outbox_status"), status_check((*STATUSES, "held"))
        )


def downgrade():
    op.execute("DELETE FROM outbox WHERE status = 'held'")  # never sent: nothing to keep
    with op.batch_alter_table("outbox") as batch:
        batch.drop_constraint(op.f("ck_outbox_outbox_status"), type_="check")
        batch.create_check_constraint(op.f("ck_outbox_outbox_status"), status_check(STATUSES))
    op.drop_index(op.f("ix_used_once_expires_at"), table_name="used_once")
    op.drop_table("used_once")
