"""Personal API tokens

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26

Scripts and curl authenticate with `Authorization: Bearer dapi_…` (API.md 14). A token is
kept only as its SHA-256 hash and the first 12 characters shown in lists; its scopes and
the locations it is limited to narrow its user's current roles, never widen them. An audit
entry made through a token names it (`actor.tokenId`).
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "api_tokens",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=12), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("location_ids", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_ip", sa.String(length=45), nullable=True),
        sa.Column("expiry_noticed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_api_tokens_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index("ix_api_tokens_expires_at", ["expires_at"], unique=False)
        batch_op.create_index("ix_api_tokens_user_created", ["user_id", "created_at"], unique=False)
    with op.batch_alter_table("audit_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("actor_token_id", sa.Uuid(), nullable=True))


def downgrade():
    with op.batch_alter_table("audit_entries", schema=None) as batch_op:
        batch_op.drop_column("actor_token_id")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index("ix_api_tokens_user_created")
        batch_op.drop_index("ix_api_tokens_expires_at")
    op.drop_table("api_tokens")
