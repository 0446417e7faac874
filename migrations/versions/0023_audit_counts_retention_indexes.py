"""Audit counts kept by the database; indexes for retention

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27

`audit_counts` holds how many audit entries each location has, as rows of +n / -n that
triggers on `audit_entries` add for every statement that inserts, deletes or moves
entries (statement-level with transition tables on PostgreSQL, row-level on SQLite), so
`GET /audit/` totals are a sum of a few rows at any size (models/audit.py). The existing
entries are counted here, under a lock that keeps writers out until the triggers exist.

Retention's batches (privacy.run_retention) each look for the next spent rows, oldest
first: without an index on what they look for, a batch read the whole table (EXPLAIN at 1M
rows in bench/SCALE.md).
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_votes_receipt_expires_at", "votes", ["receipt_expires_at"]),
    ("ix_role_grants_expires_at", "role_grants", ["expires_at"]),
    ("ix_role_grants_used_at", "role_grants", ["used_at"]),
    ("ix_tokens_expires_at", "tokens", ["expires_at"]),
    ("ix_tokens_used_at", "tokens", ["used_at"]),
    ("ix_outbox_status_sent_at", "outbox", ["status", "sent_at"]),
    ("ix_outbox_status_created_at", "outbox", ["status", "created_at"]),
)

POSTGRESQL_TRIGGERS = """
CREATE FUNCTION audit_counts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_counts (location_id, entries)
    SELECT location_id, count(*) FROM added GROUP BY location_id;
    RETURN NULL;
END $$;
CREATE FUNCTION audit_counts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_counts (location_id, entries)
    SELECT location_id, -count(*) FROM removed GROUP BY location_id;
    RETURN NULL;
END $$;
CREATE FUNCTION audit_counts_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_counts (location_id, entries)
    SELECT location_id, sum(n) FROM (
        SELECT location_id, -1 AS n FROM removed
        UNION ALL SELECT location_id, 1 FROM added
    ) AS moves GROUP BY location_id HAVING sum(n) <> 0;
    RETURN NULL;
END $$;
CREATE TRIGGER audit_entries_added AFTER INSERT ON audit_entries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION audit_counts_added();
CREATE TRIGGER audit_entries_removed AFTER DELETE ON audit_entries
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION audit_counts_removed();
CREATE TRIGGER audit_entries_moved AFTER UPDATE ON audit_entries
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION audit_counts_moved();
"""

SQLITE_TRIGGERS = (
    """CREATE TRIGGER audit_entries_added AFTER INSERT ON audit_entries BEGIN
        INSERT INTO audit_counts (location_id, entries) VALUES (NEW.location_id, 1);
    END""",
    """CREATE TRIGGER audit_entries_removed AFTER DELETE ON audit_entries BEGIN
        INSERT INTO audit_counts (location_id, entries) VALUES (OLD.location_id, -1);
    END""",
    """CREATE TRIGGER audit_entries_moved AFTER UPDATE OF location_id ON audit_entries
    WHEN OLD.location_id IS NOT NEW.location_id BEGIN
        INSERT INTO audit_counts (location_id, entries)
        VALUES (OLD.location_id, -1), (NEW.location_id, 1);
    END""",
)


UNREDACTED = sa.text("redacted_at IS NULL")


def upgrade():
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)
    # Votes still to redact: the only rows retention looks at, where the index on
    # (redacted_at, created_at) left the planner walking every redacted vote.
    op.drop_index("ix_votes_redaction_due", table_name="votes")
    op.create_index(
        "ix_votes_unredacted_created",
        "votes",
        ["created_at"],
        postgresql_where=UNREDACTED,
        sqlite_where=UNREDACTED,
    )
    op.create_table(
        "audit_counts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("location_id", sa.Uuid(), nullable=True),
        sa.Column("entries", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_counts")),
    )
    op.create_index("ix_audit_counts_location", "audit_counts", ["location_id", "entries"])
    if op.get_bind().dialect.name == "postgresql":
        # Writers wait until the triggers exist, so none is counted twice or missed.
        op.execute("LOCK TABLE audit_entries IN SHARE ROW EXCLUSIVE MODE")
        op.execute(POSTGRESQL_TRIGGERS)
    else:
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)
    op.execute(
        "INSERT INTO audit_counts (location_id, entries)"
        " SELECT location_id, count(*) FROM audit_entries GROUP BY location_id"
    )


def downgrade():
    for trigger in ("audit_entries_added", "audit_entries_removed", "audit_entries_moved"):
        if op.get_bind().dialect.name == "postgresql":
            op.execute(f"DROP TRIGGER {trigger} ON audit_entries")
        else:
            op.execute(f"DROP TRIGGER {trigger}")
    if op.get_bind().dialect.name == "postgresql":
        for function in ("audit_counts_added", "audit_counts_removed", "audit_counts_moved"):
            op.execute(f"DROP FUNCTION {function}()")
    op.drop_index("ix_audit_counts_location", table_name="audit_counts")
    op.drop_table("audit_counts")
    op.drop_index("ix_votes_unredacted_created", table_name="votes")
    op.create_index("ix_votes_redaction_due", "votes", ["redacted_at", "created_at"])
    for name, table, _columns in reversed(INDEXES):
        op.drop_index(name, table_name=table)
