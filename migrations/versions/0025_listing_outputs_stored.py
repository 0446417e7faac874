"""Each listing's output stored with it: its JSON and its export's CSV line

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28

A page or an export read each listing's output as the database wrote it from the listing,
its subcategory and its social links, for every request: on SQLite that was most of a
fresh page's statement work and nearly all of an export's (bench/INSTRUCTIONS.md). The
flush that changes what a listing shows now stores both texts with it
(listing_pages.keep_pages); a NULL one is written as it is read, as before.

Triggers make a stored output NULL whenever what it shows changes, however the change is
made: SQL by hand, an older release during a rolling deploy, the app itself (which then
stores a listing's again in the same flush; those a category's or social's new slug
cleared, the worker stores). So a stored output is never stale, only missing. Existing
rows start with NULL until `flask listings store-outputs` (or the worker, or their next
change) stores them: this migration adds columns, an index of the rows still to store
and triggers only, in no time at any size.
"""

# ruff: noqa: S608 (the statements are built from this file's own constants, no input)
import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

# The listing's columns its output shows (listing_pages.json_output; a test holds the two
# equal), its subcategory's slug, and its social links with their socials' slugs.
SHOWN = (
    "id",
    "created_at",
    "updated_at",
    "slug",
    "name",
    "subcategory_id",
    "description",
    "branch",
    "email",
    "phone",
    "address",
    "website",
)
CLEARED = "output_json = NULL, output_csv = NULL"


def changed(distinct: str) -> str:
    return " OR ".join(f"old.{column} {distinct} new.{column}" for column in SHOWN)


SQLITE = [
    # Recursive triggers are off: the UPDATE inside does not fire this one again (nor would
    # its WHEN hold: it changes no column shown).
    f"CREATE TRIGGER listings_output_stale AFTER UPDATE ON listings "
    f"WHEN {changed('IS NOT')} BEGIN "
    f"UPDATE listings SET {CLEARED} WHERE id = new.id; END",
    f"CREATE TRIGGER categories_output_stale AFTER UPDATE OF slug ON categories "
    f"WHEN old.slug IS NOT new.slug BEGIN "
    f"UPDATE listings SET {CLEARED} WHERE subcategory_id = new.id; END",
    f"CREATE TRIGGER socials_output_stale AFTER UPDATE OF slug ON socials "
    f"WHEN old.slug IS NOT new.slug BEGIN "
    f"UPDATE listings SET {CLEARED} WHERE id IN "
    f"(SELECT listing_id FROM listing_socials WHERE social_id = new.id); END",
    f"CREATE TRIGGER listing_socials_output_stale_insert AFTER INSERT ON listing_socials "
    f"BEGIN UPDATE listings SET {CLEARED} WHERE id = new.listing_id; END",
    f"CREATE TRIGGER listing_socials_output_stale_update AFTER UPDATE ON listing_socials "
    f"BEGIN UPDATE listings SET {CLEARED} WHERE id IN (old.listing_id, new.listing_id); END",
    f"CREATE TRIGGER listing_socials_output_stale_delete AFTER DELETE ON listing_socials "
    f"BEGIN UPDATE listings SET {CLEARED} WHERE id = old.listing_id; END",
]
SQLITE_TRIGGERS = (
    "listings_output_stale",
    "categories_output_stale",
    "socials_output_stale",
    "listing_socials_output_stale_insert",
    "listing_socials_output_stale_update",
    "listing_socials_output_stale_delete",
)

POSTGRESQL = [
    # The listing's own change clears its outputs in the row it writes (no second UPDATE).
    """CREATE FUNCTION listing_output_stale() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.output_json := NULL;
    NEW.output_csv := NULL;
    RETURN NEW;
END $$""",
    f"CREATE TRIGGER listings_output_stale BEFORE UPDATE ON listings FOR EACH ROW "
    f"WHEN ({changed('IS DISTINCT FROM')}) EXECUTE FUNCTION listing_output_stale()",
    f"""CREATE FUNCTION category_output_stale() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE listings SET {CLEARED} WHERE subcategory_id = NEW.id;
    RETURN NULL;
END $$""",
    "CREATE TRIGGER categories_output_stale AFTER UPDATE OF slug ON categories FOR EACH ROW "
    "WHEN (OLD.slug IS DISTINCT FROM NEW.slug) EXECUTE FUNCTION category_output_stale()",
    f"""CREATE FUNCTION social_output_stale() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE listings SET {CLEARED}
    WHERE id IN (SELECT listing_id FROM listing_socials WHERE social_id = NEW.id);
    RETURN NULL;
END $$""",
    "CREATE TRIGGER socials_output_stale AFTER UPDATE OF slug ON socials FOR EACH ROW "
    "WHEN (OLD.slug IS DISTINCT FROM NEW.slug) EXECUTE FUNCTION social_output_stale()",
    f"""CREATE FUNCTION link_output_stale() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE listings SET {CLEARED} WHERE id = OLD.listing_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE listings SET {CLEARED} WHERE id = NEW.listing_id;
    END IF;
    RETURN NULL;
END $$""",
    "CREATE TRIGGER listing_socials_output_stale AFTER INSERT OR UPDATE OR DELETE "
    "ON listing_socials FOR EACH ROW EXECUTE FUNCTION link_output_stale()",
]
POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS listing_socials_output_stale ON listing_socials",
    "DROP TRIGGER IF EXISTS socials_output_stale ON socials",
    "DROP TRIGGER IF EXISTS categories_output_stale ON categories",
    "DROP TRIGGER IF EXISTS listings_output_stale ON listings",
    "DROP FUNCTION IF EXISTS link_output_stale()",
    "DROP FUNCTION IF EXISTS social_output_stale()",
    "DROP FUNCTION IF EXISTS category_output_stale()",
    "DROP FUNCTION IF EXISTS listing_output_stale()",
]


# Plain ALTER TABLE on both databases (SQLite's batch mode would copy the table, and its
# search triggers would go with the old one).
def upgrade() -> None:
    op.add_column("listings", sa.Column("output_json", sa.Text(), nullable=True))
    op.add_column("listings", sa.Column("output_csv", sa.Text(), nullable=True))
    # The listings whose outputs are not stored, found without reading the others.
    missing = sa.text("output_json IS NULL")
    op.create_index(
        "ix_listings_output_missing",
        "listings",
        ["id"],
        sqlite_where=missing,
        postgresql_where=missing,
    )
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in POSTGRESQL if postgresql else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        drops = POSTGRESQL_DROP
    else:
        drops = [f"DROP TRIGGER IF EXISTS {name}" for name in SQLITE_TRIGGERS]
    for statement in drops:
        op.execute(statement)
    op.drop_index("ix_listings_output_missing", table_name="listings")
    op.drop_column("listings", "output_csv")
    op.drop_column("listings", "output_json")
