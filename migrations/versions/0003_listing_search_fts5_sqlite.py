"""Trigram full-text index for listing search (SQLite)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

SQLite's counterpart of 0002's pg_trgm index: an FTS5 table with the trigram tokenizer
holding each listing's id and search_text, kept in step by triggers. Search narrows with
MATCH on each word of three or more characters, then applies the same LIKE filters.

It keys on listings.id, not on SQLite's rowid, which VACUUM and table rebuilds may
renumber. A later batch migration that recreates `listings` on SQLite must recreate these
triggers (the FTS table keeps its rows).
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

STATEMENTS = [
    "CREATE VIRTUAL TABLE listings_fts USING fts5("
    "listing_id UNINDEXED, search_text, tokenize='trigram')",
    "CREATE TRIGGER listings_fts_insert AFTER INSERT ON listings BEGIN "
    "INSERT INTO listings_fts(listing_id, search_text) VALUES (new.id, new.search_text); END",
    "CREATE TRIGGER listings_fts_delete AFTER DELETE ON listings BEGIN "
    "DELETE FROM listings_fts WHERE listing_id = old.id; END",
    "CREATE TRIGGER listings_fts_update AFTER UPDATE OF search_text ON listings BEGIN "
    "UPDATE listings_fts SET search_text = new.search_text WHERE listing_id = old.id; END",
    "INSERT INTO listings_fts(listing_id, search_text) SELECT id, search_text FROM listings",
]


def upgrade():
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade():
    if op.get_bind().dialect.name != "sqlite":
        return
    for trigger in ("insert", "delete", "update"):
        op.execute(f"DROP TRIGGER IF EXISTS listings_fts_{trigger}")
    op.execute("DROP TABLE IF EXISTS listings_fts")
