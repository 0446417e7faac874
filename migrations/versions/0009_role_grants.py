"""Roles offered to existing accounts wait for their user's consent

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23

Inviting an address that already has an active account no longer gives it the role at
once (API.md 9): a pending grant is stored and the user is mailed a link to accept it
(`POST /me/roles/accept/:token`). A grant is not a role: nothing reads it for access or
lists it. As with the other one-time tokens, only the SHA-256 hash of its token is kept;
it works once (`used_at`) and for 7 days. A super grant has no location, an owner or
admin grant always one; a grant goes with its user or its location.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "role_grants",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("location_id", sa.Uuid(), nullable=True),
        sa.Column(
            "role",
            sa.Enum(
                "super",
                "owner",
                "admin",
                name="granted_role",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(role = 'super' AND location_id IS NULL)"
            " OR (role <> 'super' AND location_id IS NOT NULL)",
            name=op.f("ck_role_grants_location_unless_super"),
        ),
        sa.ForeignKeyConstraint(
            ["location_id"],
            ["locations.id"],
            name=op.f("fk_role_grants_location_id_locations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_role_grants_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_role_grants")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_role_grants_token_hash")),
    )
    op.create_index("ix_role_grants_user_id", "role_grants", ["user_id"])
    op.create_index("ix_role_grants_location_id", "role_grants", ["location_id"])


def downgrade():
    op.drop_index("ix_role_grants_location_id", table_name="role_grants")
    op.drop_index("ix_role_grants_user_id", table_name="role_grants")
    op.drop_table("role_grants")
