"""One spelling per address: stored addresses normalised, every vote's address hashed

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23

Addresses are now compared NFKC-normalised, case-folded, with the domain decoded from IDNA
(`normalize_email`); until now they were stored lower-cased. An account stored as
`Straße@…` would no longer be found by its own spelling, so every stored user address is
rewritten to the new form. Where two accounts turn out to be one address, neither is
changed and the pair is printed: an operator decides which account stays.

Votes stored before revision 0008 get the keyed hash of their address (duplicate checks and
`flask privacy erase` find votes by it). Both use the application's code and keys: `flask db
upgrade` runs inside the application.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

users = sa.table("users", sa.column("id", sa.Uuid()), sa.column("email", sa.String()))
votes = sa.table(
    "votes",
    sa.column("id", sa.Uuid()),
    sa.column("your_email", sa.String()),
    sa.column("email_hash", sa.String()),
)


def upgrade():
    from directory_api.platform.crypto import email_hash
    from directory_api.platform.email_addresses import normalize_email

    connection = op.get_bind()
    rows = connection.execute(sa.select(users.c.id, users.c.email)).all()
    taken = {email for _, email in rows}
    for user_id, email in rows:
        normal = normalize_email(email)
        if normal == email:
            continue
        if normal in taken:
            print(f"users {email!r} and {normal!r} are one address now; neither was changed")
            continue
        connection.execute(users.update().where(users.c.id == user_id).values(email=normal))
        taken.add(normal)

    unhashed = sa.select(votes.c.id, votes.c.your_email).where(
        votes.c.email_hash.is_(None), votes.c.your_email.is_not(None)
    )
    while batch := connection.execute(unhashed.limit(1000)).all():
        for vote_id, email in batch:
            connection.execute(
                votes.update().where(votes.c.id == vote_id).values(email_hash=email_hash(email))
            )


def downgrade():
    pass  # the old form was lower-case only; the new one is as good an address
