"""/health: liveness with a database round trip."""

from flask import Blueprint
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ..errors import problem
from ..extensions import db

bp = Blueprint("health", __name__)


@bp.get("/health")
def health():
    """200 when the database answers, else 503."""
    try:
        db.session.execute(text("SELECT 1"))
    except SQLAlchemyError:
        db.session.rollback()
        return problem(503, "The database is not answering.", checks={"database": "down"})
    return {"status": "ok"}
