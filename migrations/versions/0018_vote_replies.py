"""Public replies to votes

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26

A location's staff answer a vote in public (API.md 15): one reply per vote, kept on the
vote itself with its author (who may be deleted later: the reply stays, authorless) and
when it was first written and last changed. The first reply to a confirmed vote mails its
submitter a withdraw link with a token of its own (`notice_token_hash`), beside the
receipt's.
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("votes") as batch:
        batch.add_column(sa.Column("reply_body", sa.Text(), nullable=True))
        batch.add_column(sa.Column("reply_author_id", sa.Uuid(), nullable=True))
        batch.add_column(sa.Column("reply_created_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("reply_updated_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("notice_token_hash", sa.String(length=64), nullable=True))
        batch.create_foreign_key(
            "fk_votes_reply_author_id_users",
            "users",
            ["reply_author_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_index("ix_votes_reply_author_id", ["reply_author_id"])
        batch.create_unique_constraint("uq_votes_notice_token_hash", ["notice_token_hash"])


def downgrade():
    with op.batch_alter_table("votes") as batch:
        batch.drop_constraint("uq_votes_notice_token_hash", type_="unique")
        batch.drop_index("ix_votes_reply_author_id")
        batch.drop_constraint("fk_votes_reply_author_id_users", type_="foreignkey")
        batch.drop_column("notice_token_hash")
        batch.drop_column("reply_updated_at")
        batch.drop_column("reply_created_at")
        batch.drop_column("reply_author_id")
        batch.drop_column("reply_body")
