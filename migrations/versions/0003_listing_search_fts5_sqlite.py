"""Trigram full-text index for listing search (SQLite)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

SQLite's counterpart of 0002's pg_trgm index: an FTS5 table with the trigram tokenizer
over listings.search_text (external content, kept in step by triggers). Search narrows
with MATCH on each word of three or more characters, then applies the same LIKE filters.

A later batch migration that recreates `listings` on SQLite must recreate these triggers
and run INSERT INTO listings_fts(listings_fts) VALUES ('rebuild').
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

STATEMENTS = [
    "CREATE VIRTUAL TABLE listings_fts USING fts5("
    "search_text, content='listings', content_rowid='rowid', tokenize='trigram')",
    "CREATE TRIGGER listings_fts_insert AFTER INSERT ON listings BEGIN "
    "INSERT INTO listings_fts(rowid, search_text) VALUES (new.rowid, new.search_text); END",
    "CREATE TRIGGER listings_fts_delete AFTER DELETE ON listings BEGIN "
    "INSERT INTO listings_fts(listings_fts, rowid, search_text) "
    "VALUES ('delete', old.rowid, old.search_text); END",
    "CREATE TRIGGER listings_fts_update AFTER UPDATE OF search_text ON listings BEGIN "
    "INSERT INTO listings_fts(listings_fts, rowid, search_text) "
    "VALUES ('delete', old.rowid, old.search_text); "
    "INSERT INTO listings_fts(rowid, search_text) VALUES (new.rowid, new.search_text); END",
    "INSERT INTO listings_fts(listings_fts) VALUES ('rebuild')",
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
