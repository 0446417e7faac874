"""Receipts by address and time: the allowance counts the address's own

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29

A new vote counts its address's receipts of the last 24 hours, up to the allowance
(vote_integrity.RECEIPTS_SINCE). On the index of all the address's votes by time, that
read every vote the address made that day to find its few receipts: an address that
floods (its allowance used, its votes without receipts) made each of its next votes read
all of its day's votes. PostgreSQL did worse: where the address holds many of the votes,
it expected its receipts soon in any order and scanned the table under the LIMIT, every
row of it when the address has none (tests/test_vote_integrity.py). This index holds the
receipts alone, by address and time: the count reads at most the allowance's entries. It
replaces the address's index by time, which nothing else reads (an address's votes are
found by 0026's index, which begins with the address).

On PostgreSQL both are built and dropped CONCURRENTLY: votes keep coming meanwhile. A
build that failed leaves an invalid index, which running this again drops first.
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

NAME = "ix_votes_email_hash_receipts"
RECEIPTS = sa.text("receipt_token_hash IS NOT NULL")
OLD = "ix_votes_email_hash_created"
COLUMNS = ["email_hash", "created_at"]


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(NAME, table_name="votes", postgresql_concurrently=True, if_exists=True)
            op.create_index(
                NAME, "votes", COLUMNS, postgresql_where=RECEIPTS, postgresql_concurrently=True
            )
            op.drop_index(OLD, table_name="votes", postgresql_concurrently=True)
    else:
        op.create_index(NAME, "votes", COLUMNS, sqlite_where=RECEIPTS)
        op.drop_index(OLD, table_name="votes")


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(OLD, table_name="votes", postgresql_concurrently=True, if_exists=True)
            op.create_index(OLD, "votes", COLUMNS, postgresql_concurrently=True)
            op.drop_index(NAME, table_name="votes", postgresql_concurrently=True)
    else:
        op.create_index(OLD, "votes", COLUMNS)
        op.drop_index(NAME, table_name="votes")
