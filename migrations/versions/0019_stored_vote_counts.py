"""Stored vote counts for the moderation summary; suspect votes

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26

The summary (API.md 8, 15) read every vote of its location on each request (1.3 G
instructions at 100k votes). Its figures are now kept as the votes change, in the
change's transaction (vote_integrity.py): per location beside the votes' revision, per
employer beside its results count. `suspect` marks a vote held as possibly automated
(API.md 17), which staff filter on and clear in bulk. The counts start from the votes
as they are.
"""

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

LOCATION_COUNTS = {
    "pending": "NOT v.active",
    "active": "v.active",
    "unconfirmed": "NOT v.confirmed",
    "duplicates": "v.duplicate_of_id IS NOT NULL",
    "unanswered": "v.active AND v.reply_body IS NULL",
    "suspect": "v.suspect",
}
EMPLOYER_COUNTS = {"active_votes": "v.active", "pending_votes": "NOT v.active"}


def counted(criteria: str, of: str) -> str:
    return f"(SELECT count(*) FROM votes v WHERE {of} AND {criteria})"


def upgrade():
    with op.batch_alter_table("votes") as batch:
        batch.add_column(
            sa.Column("suspect", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("listings") as batch:
        for name in EMPLOYER_COUNTS:
            batch.add_column(sa.Column(name, sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("vote_revisions") as batch:
        for name in LOCATION_COUNTS:
            batch.add_column(sa.Column(name, sa.Integer(), server_default="0", nullable=False))

    op.execute(
        sa.text(
            "INSERT INTO vote_revisions (location_id, revision)"
            " SELECT DISTINCT location_id, :revision FROM votes"
            " WHERE location_id NOT IN (SELECT location_id FROM vote_revisions)"
        ).bindparams(revision=secrets.randbits(62))
    )
    location = "v.location_id = vote_revisions.location_id"
    op.execute(
        "UPDATE vote_revisions SET "
        + ", ".join(
            f"{name} = {counted(criteria, location)}" for name, criteria in LOCATION_COUNTS.items()
        )
    )
    employer = "v.employer_id = listings.id"
    op.execute(
        "UPDATE listings SET "
        + ", ".join(
            f"{name} = {counted(criteria, employer)}" for name, criteria in EMPLOYER_COUNTS.items()
        )
        + " WHERE kind = 'employer'"
    )


def downgrade():
    with op.batch_alter_table("vote_revisions") as batch:
        for name in LOCATION_COUNTS:
            batch.drop_column(name)
    # Not a batch: on SQLite that rebuilds listings, which votes (and its FTS triggers)
    # refer to; both databases drop a plain column in place.
    for name in EMPLOYER_COUNTS:
        op.execute(f"ALTER TABLE listings DROP COLUMN {name}")
    with op.batch_alter_table("votes") as batch:
        batch.drop_column("suspect")
