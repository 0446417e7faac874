"""The write anchor of issue 36: a separate, minimal Flask app that stores one row per
request, beside bench/bare_app.py (which reads nothing).

A vote writes, and bare Flask does not; this is what the vote is measured against as well:
one JSON body read, one INSERT of one row into the same database (`DATABASE_URL`, the
bench's), through the same driver (SQLAlchemy Core on psycopg or sqlite3, with the
service's SQLite settings), one commit. No validation, no extensions, no hooks.
"""

import os
import uuid
from datetime import UTC, datetime

from flask import Flask, jsonify, request
from sqlalchemy import Column, DateTime, Engine, MetaData, String, Table, Text, create_engine, event

# The service's own spelling of the URL (psycopg 3 for postgresql://) and SQLite settings.
from config import database_url
from directory_api import _sqlite_pragmas as sqlite_pragmas

writes = Table(
    "bench_writes",
    MetaData(),
    Column("id", String(32), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("body", Text, nullable=False),
)


def create_table(url: str, table: Table = writes) -> None:
    """The anchor's table (or another bench anchor's), made once before its workers start
    (two of them making it at once would race: one fails to boot)."""
    maker = create_engine(database_url(url))
    table.create(maker, checkfirst=True)
    maker.dispose()


def engine_for(url: str) -> Engine:
    made = create_engine(database_url(url))
    if made.dialect.name == "sqlite":
        event.listen(made, "connect", sqlite_pragmas)  # the service's own, so both write alike
    return made


# In the app's own process (gunicorn's workers, the instruction counter): its database.
engine = engine_for(os.environ["DATABASE_URL"]) if "DATABASE_URL" in os.environ else None
INSERT = writes.insert()

app = Flask(__name__)


@app.post("/writes/")
def write():
    row = {"id": uuid.uuid4().hex, "created_at": datetime.now(UTC), "body": request.get_data()}
    with engine.begin() as connection:  # one transaction, one commit
        connection.execute(INSERT, {**row, "body": row["body"].decode()})
    return jsonify({"id": row["id"]}), 201


@app.get("/items/")
def ready():  # what bench/run.py asks to know the server is up
    return jsonify({"items": []})
