"""The revision of each location's votes

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26

A random number that turns with every change to a location's votes, in the change's own
transaction: the votes export's ETag is known before a row is read, so an unchanged export
answers 304 without streaming (issue 28). Every location that has votes starts with one.
"""

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "vote_revisions",
        sa.Column("location_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["location_id"],
            ["locations.id"],
            name=op.f("fk_vote_revisions_location_id_locations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("location_id", name=op.f("pk_vote_revisions")),
    )
    op.execute(
        sa.text(
            "INSERT INTO vote_revisions (location_id, revision)"
            " SELECT DISTINCT location_id, :revision FROM votes"
        ).bindparams(revision=secrets.randbits(62))
    )


def downgrade():
    op.drop_table("vote_revisions")
