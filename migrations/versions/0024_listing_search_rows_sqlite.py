"""The SQLite search index keyed by an integer of its own

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27

Migration 0003's FTS5 table held each listing's id in an UNINDEXED column, so its triggers
found a listing's row by reading every row of the index: 35-45 ms per rename or delete of
one listing among 100,000, growing with the table (measured on bench/run.py's data).

Now `listings_fts_rows` gives each listing an integer key (its INTEGER PRIMARY KEY, which
no VACUUM or table rebuild renumbers, unlike an implicit rowid), and the FTS5 table's rowid
is that key. The triggers reach a listing's index row through the key, and search reads
matching listings through it (search.py). The FTS5 table keeps only the text, with
`detail=none`: search asks it for single trigrams, never for phrases, so positions are not
stored (a third of the size).
"""

from alembic import context, op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

TRIGGERS = ("insert", "delete", "update")
KEY_OF_NEW = "(SELECT fts_rowid FROM listings_fts_rows WHERE listing_id = new.id)"
KEY_OF_OLD = "(SELECT fts_rowid FROM listings_fts_rows WHERE listing_id = old.id)"

UPGRADE = [
    *(f"DROP TRIGGER IF EXISTS listings_fts_{trigger}" for trigger in TRIGGERS),
    # IF EXISTS throughout: SQLite's DDL here is not transactional, so a run that stopped
    # partway is run again from the start.
    "DROP TABLE IF EXISTS listings_fts",
    "DROP TABLE IF EXISTS listings_fts_rows",
    "CREATE TABLE listings_fts_rows ("
    "fts_rowid INTEGER PRIMARY KEY, listing_id CHAR(32) NOT NULL UNIQUE)",
    "CREATE VIRTUAL TABLE listings_fts USING fts5(search_text, tokenize='trigram', detail=none)",
    "INSERT INTO listings_fts_rows (listing_id) SELECT id FROM listings ORDER BY rowid",
    "INSERT INTO listings_fts (rowid, search_text) SELECT rows.fts_rowid, listings.search_text "
    "FROM listings_fts_rows AS rows JOIN listings ON listings.id = rows.listing_id",
    "CREATE TRIGGER listings_fts_insert AFTER INSERT ON listings BEGIN "
    "INSERT INTO listings_fts_rows (listing_id) VALUES (new.id); "
    f"INSERT INTO listings_fts (rowid, search_text) VALUES ({KEY_OF_NEW}, new.search_text); "
    "END",
    "CREATE TRIGGER listings_fts_delete AFTER DELETE ON listings BEGIN "
    f"DELETE FROM listings_fts WHERE rowid = {KEY_OF_OLD}; "
    "DELETE FROM listings_fts_rows WHERE listing_id = old.id; "
    "END",
    "CREATE TRIGGER listings_fts_update AFTER UPDATE OF search_text ON listings BEGIN "
    f"UPDATE listings_fts SET search_text = new.search_text WHERE rowid = {KEY_OF_OLD}; "
    "END",
]

REMOVE = [
    *(f"DROP TRIGGER IF EXISTS listings_fts_{trigger}" for trigger in TRIGGERS),
    "DROP TABLE IF EXISTS listings_fts",
    "DROP TABLE IF EXISTS listings_fts_rows",
]


def upgrade():
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in UPGRADE:
        op.execute(statement)


def downgrade():
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in REMOVE:
        op.execute(statement)
    # Migration 0003's table and triggers, made and filled again by its own statements.
    for statement in context.script.get_revision("0003").module.STATEMENTS:
        op.execute(statement)
