"""The stack's floor (issue 36): a separate, minimal Flask app doing what a public vote, a
signed-in `GET /me/` and a fresh list page cannot do without, with the libraries this
service must use (Flask-Limiter, marshmallow, Flask-SQLAlchemy's ORM, Flask-Session,
Flask-Login), each set up the way its own documentation shows, and none of this service's
code on the way.

Where bench/bare_app.py is what Flask costs and bench/bare_write_app.py what one row
costs, this is what the chosen stack costs for the same answers before any feature of
API.md: a target below this app's count cannot be met by removing work from the service,
only by dropping one of those libraries from the request.

- `POST /locations/<slug>/votes/submit/employer`: the same two rate limits (per location,
  counted only when accepted; per client address), moving window, their headers, in the
  service's store (`RATELIMIT_STORAGE_URI`); the body loaded by the service's own schema
  (`EmployerSubmission`: the contract's fields and rules); the location found by slug; one
  vote row added through the ORM and committed (to a table of its own with the votes'
  columns and types, so the bench's counts stay true); `{"id", "status"}` with 201. No
  receipt, duplicate check, stored counts, screening, idempotency, webhook or log line.
- `GET /me/`: the server-side session read from the service's store (Redis or files, as
  Flask-Session keeps them), Flask-Login's user loaded through the ORM by the session's
  token, dumped by the service's `UserOut` (no roles). No sealing, no security headers.
- `GET /locations/<slug>/businesses/?page=&perPage=`: one statement through
  Flask-SQLAlchemy's session: the page's businesses by name, each as the output the
  service stores with it (its JSON, migration 0025: the floor writes no JSON of its own),
  with their location found by slug and their stored total; the body joined around them.
  No ETag, no validation of the query, no page links, no kept answers, no log line. A
  page past the last is answered as empty with a total of 0 (the bench asks none).

The service's session listeners (stored counts, audit, webhooks: registered on SQLAlchemy's
`Session` class) see this app's flushes too when both run in one process (the instruction
counter): they find none of their models and return (a few thousand instructions).
"""

import os
import uuid
from datetime import UTC, datetime

from cachelib.file import FileSystemCache
from flask import Flask, jsonify, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from flask_login import LoginManager, UserMixin, current_user, login_required, login_user
from flask_session import Session
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import Column, MetaData, Table, bindparam, select
from sqlalchemy.orm import DeclarativeBase

from bench.bare_write_app import create_table as create_anchor_table
from config import database_url
from directory_api import _sqlite_pragmas as sqlite_pragmas
from directory_api.models import Listing, ListingCount, Location, User, Vote, VoteType
from directory_api.schemas.users import UserOut
from directory_api.schemas.votes import EmployerSubmission


class Base(DeclarativeBase):
    pass


def vote_columns() -> list[Column]:
    """The votes table's columns and types, without its keys to other tables."""
    return [
        Column(column.name, column.type, primary_key=column.primary_key)
        for column in Vote.__table__.columns
    ]


class FloorVote(Base):
    __table__ = Table("bench_floor_votes", MetaData(), *vote_columns())


def create_table(url: str) -> None:
    """Made once, before the app serves (bare_write_app's way)."""
    create_anchor_table(url, FloorVote.__table__)


# A location's page of businesses, their stored outputs, and their stored total (built once;
# the location by a subquery, so that its id is a constant of the page's index scan).
_LOCATION = select(Location.id).where(Location.slug == bindparam("slug")).scalar_subquery()
LIST_PAGE = (
    select(
        Listing.output_json,
        select(ListingCount.total)
        .where(ListingCount.location_id == _LOCATION, ListingCount.kind == "business")
        .scalar_subquery(),
    )
    .where(Listing.location_id == _LOCATION, Listing.kind == "business")
    .order_by(Listing.name, Listing.id)
    .limit(bindparam("limit"))
    .offset(bindparam("offset"))
)


class FloorUser(UserMixin):
    """Flask-Login's user: the service's User row, read through the ORM."""

    def __init__(self, user: User) -> None:
        self.user = user

    def get_id(self) -> str:
        return self.user.session_token


def create_floor_app() -> Flask:
    app = Flask(__name__)
    url = database_url(os.environ["DATABASE_URL"])
    redis_url = os.environ.get("REDIS_URL")
    app.config.update(
        SECRET_KEY="floor-only-5tG8kP2wQ9zR4mX7vB1nC6yH3jL0aS",  # noqa: S106 (a bench app)
        SQLALCHEMY_DATABASE_URI=url,
        RATELIMIT_STORAGE_URI=os.environ.get("RATELIMIT_STORAGE_URI") or redis_url or "memory://",
        RATELIMIT_STRATEGY="moving-window",
        RATELIMIT_HEADERS_ENABLED=True,
        SESSION_REFRESH_EACH_REQUEST=False,  # a session is written when it changes
    )
    if redis_url:
        import redis

        app.config.update(SESSION_TYPE="redis", SESSION_REDIS=redis.Redis.from_url(redis_url))
    else:
        directory = os.path.join(os.environ.get("SESSION_FILE_DIR", app.instance_path), "floor")
        app.config.update(SESSION_TYPE="cachelib", SESSION_CACHELIB=FileSystemCache(directory))
    db = SQLAlchemy(app, model_class=Base)
    if url.startswith("sqlite"):
        from sqlalchemy import event

        with app.app_context():
            event.listen(db.engine, "connect", sqlite_pragmas)
    Session(app)
    limiter = Limiter(get_remote_address, app=app)
    # Its limits are checked where a route declares them: no look for app-wide ones before
    # every request (it has none; the service drops that hook as well, limits.py).
    app.before_request_funcs[None].remove(limiter._check_request_limit)
    logins = LoginManager(app)
    submission = EmployerSubmission()
    shown = UserOut()

    @logins.user_loader
    def load_user(token: str) -> FloorUser | None:
        user = db.session.scalar(select(User).where(User.session_token == token))
        return FloorUser(user) if user is not None else None

    @app.post("/locations/<slug>/votes/submit/employer")
    @limiter.shared_limit(
        "100000000/hour",
        scope="votes-location",
        key_func=lambda: request.view_args["slug"],
        deduct_when=lambda response: response.status_code < 400,
    )
    @limiter.limit("100000000/hour")
    def submit(slug: str):
        data = submission.load(request.get_json())
        location_id = db.session.scalar(select(Location.id).where(Location.slug == slug))
        if location_id is None:
            return jsonify({"title": "Not Found"}), 404
        now = datetime.now(UTC)
        data.pop("typed_email")
        data.pop("employer", None)
        vote_id = uuid.uuid4()  # answered as set: not read again after the commit
        vote = FloorVote(
            id=vote_id,
            created_at=now,
            updated_at=now,
            location_id=location_id,
            type=VoteType.EMPLOYER,
            active=False,
            **data,
        )
        db.session.add(vote)
        db.session.commit()
        return jsonify({"id": str(vote_id), "status": "received"}), 201

    @app.get("/me/")
    @login_required
    def me():
        user = current_user.user
        user.roles_read = []
        return jsonify(shown.dump(user))

    @app.get("/locations/<slug>/businesses/")
    def businesses(slug: str):
        page, per_page = int(request.args.get("page", 1)), int(request.args.get("perPage", 20))
        rows = db.session.execute(
            LIST_PAGE, {"slug": slug, "limit": per_page, "offset": (page - 1) * per_page}
        ).all()
        total = rows[0][1] if rows else 0
        items = ",".join(output for output, _ in rows)
        body = f'{{"items":[{items}],"page":{page},"perPage":{per_page},"total":{total}}}'
        return app.response_class(body, mimetype="application/json")

    @app.post("/floor/sign-in")
    def sign_in():
        email = request.get_json()["email"]
        user = db.session.scalar(select(User).where(User.email == email))
        login_user(FloorUser(user))
        return jsonify({}), 200

    @app.get("/items/")
    def ready():  # what bench/run.py asks to know the server is up
        return jsonify({"items": []})

    return app
