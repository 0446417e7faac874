"""Answers kept for Idempotency-Key retries of the public vote submission

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23

A retry with the same key (scope: method and path) and the same body within 24 hours gets
the first answer again. The key and the request are kept only as SHA-256 hashes; the
answer (status and JSON body) carries no personal data. Rows older than 24 hours are
purged; the index on created_at keeps that delete cheap.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "idempotency_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idempotency_keys")),
        sa.UniqueConstraint(
            "scope", "key_hash", name=op.f("uq_idempotency_keys_scope_key_hash")
        ),
    )
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])


def downgrade():
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
