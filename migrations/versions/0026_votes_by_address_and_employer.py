"""Votes by address and employer, oldest first

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29

A new employer vote reads its address's earliest vote for that employer (it is a duplicate
of it, vote_integrity.history_columns). With an index on the address alone and one on the
employer alone, PostgreSQL combined the two and read every vote of that address for that
employer, then sorted them: an address with 6,775 votes for one employer cost 6.3 ms of
PostgreSQL's time for each new one (EXPLAIN ANALYZE on the bench's data, bench/WALLTIME.md).
On this index the earliest is its first entry, whatever the address's number of votes.

On PostgreSQL the index is built CONCURRENTLY: votes keep coming while it is built on a
large table. A build that failed leaves an invalid index, which running this again drops
first.
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

NAME = "ix_votes_email_hash_employer_created"
COLUMNS = ["email_hash", "employer_id", "created_at", "id"]


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(NAME, table_name="votes", postgresql_concurrently=True, if_exists=True)
            op.create_index(NAME, "votes", COLUMNS, postgresql_concurrently=True)
    else:
        op.create_index(NAME, "votes", COLUMNS)


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(NAME, table_name="votes", postgresql_concurrently=True)
    else:
        op.drop_index(NAME, table_name="votes")
