"""Webhook subscriptions

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26

Per location (or, without one, global: a super's) a receiver's URL, the events it wants,
and its signing secret, kept encrypted as outbox bodies are (it must be read to sign), with
the one it replaced while both sign (API.md 16).
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "webhook_subscriptions",
        sa.Column("location_id", sa.Uuid(), nullable=True),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(length=200), nullable=True),
        sa.Column("enabled", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("disabled_reason", sa.String(length=200), nullable=True),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["location_id"],
            ["locations.id"],
            name=op.f("fk_webhook_subscriptions_location_id_locations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_subscriptions")),
    )
    for column in ("created_at", "updated_at"):
        op.create_index(
            op.f(f"ix_webhook_subscriptions_{column}"), "webhook_subscriptions", [column]
        )
    op.create_index(
        "ix_webhook_subscriptions_location_created",
        "webhook_subscriptions",
        ["location_id", "created_at"],
    )


def downgrade():
    op.drop_index("ix_webhook_subscriptions_location_created", table_name="webhook_subscriptions")
    for column in ("created_at", "updated_at"):
        op.drop_index(op.f(f"ix_webhook_subscriptions_{column}"), table_name="webhook_subscriptions")
    op.drop_table("webhook_subscriptions")
