"""Record which template each outbox message was rendered from

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

The outbox worker logs every delivery by id, template and number of recipients, never by
body (bodies carry reset and invitation links). Rows written before this revision keep an
empty template.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(
            sa.Column("template", sa.String(length=64), nullable=False, server_default="")
        )


def downgrade():
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("template")
