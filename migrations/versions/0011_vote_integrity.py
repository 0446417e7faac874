"""Vote integrity: confirmed employer votes, flagged duplicates, stored results counts

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23

API.md 8. An employer vote is confirmed from the receipt mailed to its submitter: one
token per vote, kept only as its SHA-256 (`receipt_token_hash`), confirms or withdraws it
until `receipt_expires_at`. A vote from an address that already voted for the same
employer at the location points at the earliest such vote (`duplicate_of_id`; deleting
that one releases the pointer). `listings.vote_count` keeps each employer's active,
non-duplicate votes, so the public results read counts instead of counting votes; it is
filled here from the votes that exist (none of which is a duplicate yet). The receipt cap
counts an address's recent votes: the e-mail hash index gains `created_at`.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("votes") as batch:
        batch.add_column(
            sa.Column("confirmed", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch.add_column(sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("duplicate_of_id", sa.Uuid(), nullable=True))
        batch.add_column(sa.Column("receipt_token_hash", sa.String(length=64), nullable=True))
        batch.add_column(
            sa.Column("receipt_expires_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch.create_foreign_key(
            "fk_votes_duplicate_of_id_votes",
            "votes",
            ["duplicate_of_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_unique_constraint("uq_votes_receipt_token_hash", ["receipt_token_hash"])
        batch.create_index("ix_votes_duplicate_of_id", ["duplicate_of_id"])
        batch.drop_index("ix_votes_email_hash")
        batch.create_index("ix_votes_email_hash_created", ["email_hash", "created_at"])
    with op.batch_alter_table("listings") as batch:
        batch.add_column(
            sa.Column("vote_count", sa.Integer(), server_default="0", nullable=False)
        )
    op.execute(
        "UPDATE listings SET vote_count = (SELECT count(*) FROM votes"
        " WHERE votes.employer_id = listings.id AND votes.active"
        " AND votes.type = 'employer')"
        " WHERE kind = 'employer'"
    )


def downgrade():
    # Not a batch: on SQLite that rebuilds listings, which votes (and its FTS triggers)
    # depend on; SQLite ≥ 3.35 and PostgreSQL both drop a column in place.
    op.execute("ALTER TABLE listings DROP COLUMN vote_count")
    with op.batch_alter_table("votes") as batch:
        batch.drop_index("ix_votes_email_hash_created")
        batch.create_index("ix_votes_email_hash", ["email_hash"])
        batch.drop_index("ix_votes_duplicate_of_id")
        batch.drop_constraint("uq_votes_receipt_token_hash", type_="unique")
        batch.drop_constraint("fk_votes_duplicate_of_id_votes", type_="foreignkey")
        batch.drop_column("receipt_expires_at")
        batch.drop_column("receipt_token_hash")
        batch.drop_column("duplicate_of_id")
        batch.drop_column("confirmed_at")
        batch.drop_column("confirmed")
