"""The audit log: one entry per privileged write, role change and sign-in event

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23

API.md 10. An entry names its actor, target and location by id, with the e-mail or slug
they had at the time, and no foreign keys: nothing that later happens to a user, a
location or a listing changes or removes the record. `changes` holds field → [old, new]
with personal data redacted. The indexes serve the default order (newest first), each
filter with that order, and the retention delete (AUDIT_RETENTION_DAYS).
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "audit_entries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_id", sa.Uuid(), nullable=True),
        sa.Column("actor_email", sa.String(length=254), nullable=True),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("target_type", sa.String(length=16), nullable=False),
        sa.Column("target_id", sa.Uuid(), nullable=True),
        sa.Column("target_slug", sa.String(length=100), nullable=True),
        sa.Column("location_id", sa.Uuid(), nullable=True),
        sa.Column("location_slug", sa.String(length=100), nullable=True),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=True),
        sa.Column("ip", sa.String(length=45), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_entries")),
    )
    op.create_index("ix_audit_entries_at", "audit_entries", ["at", "id"])
    op.create_index("ix_audit_entries_location_at", "audit_entries", ["location_id", "at"])
    op.create_index("ix_audit_entries_actor_at", "audit_entries", ["actor_id", "at"])
    op.create_index("ix_audit_entries_action_at", "audit_entries", ["action", "at"])


def downgrade():
    for name in ("action_at", "actor_at", "location_at", "at"):
        op.drop_index(f"ix_audit_entries_{name}", table_name="audit_entries")
    op.drop_table("audit_entries")
