"""Data protection: votes keep their submitter's details for a while, the outbox no secret

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23

Votes: `flask retention run` sets yourName, yourEmail and yourPhone to null on votes
older than PII_RETENTION_DAYS and stamps `redacted_at`. What stays is `email_hash`, a keyed
hash (directory_api/platform/crypto.py) of the normalised address written whenever the address is
set, so duplicate checks and `flask privacy erase` still find a redacted vote. Rows written
before this revision get their hash in revision 0010.

Outbox: bodies are now kept encrypted while pending and emptied once delivered. This
revision empties the bodies of messages already sent and encrypts the others (pending,
or failed and kept for an operator) with the application's current key.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

outbox = sa.table(
    "outbox", sa.column("id", sa.Uuid()), sa.column("status", sa.String()), sa.column("body")
)


def upgrade():
    with op.batch_alter_table("votes") as batch:
        batch.alter_column("your_name", existing_type=sa.String(length=200), nullable=True)
        batch.alter_column("your_email", existing_type=sa.String(length=254), nullable=True)
        batch.add_column(sa.Column("email_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("redacted_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_votes_email_hash", ["email_hash"])
        batch.create_index("ix_votes_redaction_due", ["redacted_at", "created_at"])
    op.execute(outbox.update().where(outbox.c.status == "sent").values(body=""))
    rewrite_bodies(lambda body, crypto: crypto.encrypt(body))


def downgrade():
    rewrite_bodies(lambda body, crypto: crypto.decrypt(body) or "")
    # Redacted votes have no name or address to restore; they cannot go back under NOT NULL.
    op.execute("DELETE FROM votes WHERE redacted_at IS NOT NULL")
    with op.batch_alter_table("votes") as batch:
        batch.drop_index("ix_votes_redaction_due")
        batch.drop_index("ix_votes_email_hash")
        batch.drop_column("redacted_at")
        batch.drop_column("email_hash")
        batch.alter_column("your_email", existing_type=sa.String(length=254), nullable=False)
        batch.alter_column("your_name", existing_type=sa.String(length=200), nullable=False)


def rewrite_bodies(change):
    """Apply `change` to every non-empty body not yet sent, with the app's keys
    (`flask db upgrade` runs inside the application, so its configuration is at hand)."""
    from directory_api.platform import crypto

    connection = op.get_bind()
    rows = connection.execute(
        sa.select(outbox.c.id, outbox.c.body).where(outbox.c.status != "sent", outbox.c.body != "")
    ).all()
    for row_id, body in rows:
        connection.execute(
            outbox.update().where(outbox.c.id == row_id).values(body=change(body, crypto))
        )
