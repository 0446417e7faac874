"""Tables at a million rows on PostgreSQL: the audit log's pages and retention's queries.

    python bench/scale.py [--url postgresql://postgres@127.0.0.1/dirapi_scale] [--rows 1000000]

`--url` names a database of its own (created if missing, migrated, seeded once with
`--rows` audit entries, votes, outbox messages, one-time tokens and role offers, and reused
on the next run). Then, in one process, the way a WSGI server calls the app:

- `GET /audit/` and `GET /locations/:slug/audit/` (first page, and page 50), and a filtered
  list, each asked `--requests` times by a signed-in super: median and 90th percentile of
  the wall time, beside the time of the `SELECT count(*)` the kept counts replace;
- every statement retention runs to find its next batch (privacy.run_retention's own,
  caught as it builds them), under `EXPLAIN (ANALYZE, BUFFERS)`.

Writes bench/SCALE.md. Wall times depend on the machine and its load: compare within one run.
"""

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

from sqlalchemy import create_engine, make_url, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EMAIL, PASSWORD = "scale@example.org", "scale bench passphrase"
LOCATION = "scale"

# Each table's rows, from generate_series(1, :rows) as g: a spread of ages over two years,
# most of them past retention, as a service running for years would have.
SEED = {
    "audit_entries": """
        INSERT INTO audit_entries (id, at, actor_id, actor_email, action, target_type,
            target_id, target_slug, location_id, location_slug, changes, request_id, ip)
        SELECT gen_random_uuid(), now() - g * interval '60 seconds', :user_id,
            'someone@example.org',
            (ARRAY['business.update', 'auth.login', 'vote.update', 'auth.login_failed'])[1 + g % 4],
            'business', gen_random_uuid(), 'listing-' || g,
            CASE WHEN g % 4 IN (1, 3) THEN NULL ELSE :location_id END,
            CASE WHEN g % 4 IN (1, 3) THEN NULL ELSE :location END,
            '{"name": ["a", "b"]}', 'request-' || g, '203.0.113.' || (g % 250)
        FROM generate_series(1, :rows) AS g""",
    "votes": """
        INSERT INTO votes (id, location_id, type, active, business_name, vote_body,
            created_at, updated_at, your_name, your_email, redacted_at, receipt_expires_at)
        SELECT gen_random_uuid(), :location_id, 'btoc', true, 'Business ' || g % 500,
            'A vote of some length, as the public writes them.',
            now() - g * interval '60 seconds', now() - g * interval '60 seconds',
            CASE WHEN g < :rows / 2 THEN 'Name ' || g END,
            CASE WHEN g < :rows / 2 THEN 'voter' || g || '@example.org' END,
            CASE WHEN g >= :rows / 2 THEN now() END,
            CASE WHEN g < 1000 THEN now() + interval '20 days' END
        FROM generate_series(1, :rows) AS g""",
    "outbox": """
        INSERT INTO outbox (id, recipients, subject, body, status, attempts,
            next_attempt_at, created_at, sent_at)
        SELECT gen_random_uuid(), '["someone@example.org"]', 'Subject', '',
            CASE WHEN g % 100 = 0 THEN 'failed' ELSE 'sent' END, 1,
            now() - g * interval '30 seconds', now() - g * interval '30 seconds',
            CASE WHEN g % 100 = 0 THEN NULL ELSE now() - g * interval '30 seconds' END
        FROM generate_series(1, :rows) AS g
        WHERE g > 3 * 24 * 120""",  # nothing of the last 3 days: those are young
    "tokens": """
        INSERT INTO tokens (id, user_id, purpose, token_hash, expires_at, used_at, created_at)
        SELECT gen_random_uuid(), :user_id, 'password_reset', md5('token' || g),
            now() + interval '1 hour', CASE WHEN g % 1000 = 0 THEN now() END, now()
        FROM generate_series(1, :rows) AS g""",
    "role_grants": """
        INSERT INTO role_grants (id, user_id, location_id, role, token_hash, expires_at,
            used_at, created_at)
        SELECT gen_random_uuid(), :user_id, :location_id, 'admin', md5('grant' || g),
            now() + interval '1 day', CASE WHEN g % 1000 = 0 THEN now() END, now()
        FROM generate_series(1, :rows) AS g""",
}


def ensure_database(url: str) -> None:
    target = make_url(url)
    admin = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        exists = connection.scalar(
            text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": target.database}
        )
        if not exists:
            connection.exec_driver_sql(f'CREATE DATABASE "{target.database}"')
    admin.dispose()


def seed(app, rows: int) -> None:
    from flask_migrate import upgrade

    from directory_api.credentials import hash_password
    from directory_api.models import Location, User
    from directory_api.platform.extensions import db

    with app.app_context():
        upgrade()
        user = db.session.query(User).filter_by(email=EMAIL).one_or_none()
        if user is None:
            user = User(email=EMAIL, password_hash=hash_password(PASSWORD), is_super=True)
            db.session.add(user)
            db.session.add(Location(name="Scale", slug=LOCATION, email="votes@scale.example"))
            db.session.commit()
        location = db.session.query(Location).filter_by(slug=LOCATION).one()
        values = {"rows": rows, "user_id": user.id, "location_id": location.id}
        values["location"] = LOCATION
        with db.engine.begin() as connection:
            connection.exec_driver_sql("SET LOCAL statement_timeout = 0")
            for table, insert in SEED.items():
                have = connection.scalar(text(f"SELECT count(*) FROM {table}"))  # noqa: S608
                if have < rows // 2:
                    started = time.perf_counter()
                    connection.execute(text(insert), values)
                    print(f"seeded {table} in {time.perf_counter() - started:.0f} s", flush=True)
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("SET statement_timeout = 0")
            connection.exec_driver_sql("VACUUM ANALYZE")


def timed(client, path: str, requests: int) -> tuple[float, float, int]:
    """Median and 90th percentile (ms) of `requests` GETs of `path`, after a warm-up."""
    for _ in range(3):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.status_code, answer.get_data())
    took = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = client.get(path)
        took.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200
    deciles = statistics.quantiles(took, n=10)
    return statistics.median(took), deciles[8], answer.get_json()["total"]


def retention_statements(app, now: datetime) -> list[tuple[str, str]]:
    """Each statement retention runs at `now` to find a batch, its values in it, by table."""
    from directory_api import privacy
    from directory_api.platform.extensions import db

    caught = []

    def catch(ids_stmt, _act):
        statement = ids_stmt.limit(privacy.BATCH)
        table = statement.get_final_froms()[0].name
        compiled = statement.compile(db.engine, compile_kwargs={"literal_binds": True})
        caught.append((table, str(compiled)))
        return 0

    with app.app_context(), mock.patch.object(privacy, "_in_batches", catch):
        privacy.run_retention(now)
        db.session.rollback()
    return caught


def explain(app, statement: str) -> str:
    from directory_api.platform.extensions import db

    with app.app_context(), db.engine.connect() as connection:
        connection.exec_driver_sql("SET statement_timeout = 0")
        rows = connection.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {statement}").all()
        return "\n".join(row[0] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1/dirapi_scale")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=200)
    options = parser.parse_args()

    from directory_api import create_app

    ensure_database(options.url)
    app = create_app(
        "development",
        SQLALCHEMY_DATABASE_URI=options.url,
        RATELIMIT_ENABLED=False,
        LOG_LEVEL="WARNING",
        DATABASE_STATEMENT_TIMEOUT=0,  # seeding and EXPLAIN ANALYZE take their time
    )
    seed(app, options.rows)
    client = app.test_client()
    signed_in = client.post("/auth/login", json={"email": EMAIL, "password": PASSWORD})
    assert signed_in.status_code == 200, signed_in.get_data()

    lines = [
        "# Tables at a million rows (PostgreSQL)",
        "",
        f"`python bench/scale.py --rows {options.rows}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC,"
        f" {options.requests} requests per row, in-process (the test client: the whole",
        "request, as a WSGI server would make it, without the network). Wall times on a shared",
        "2-core machine: compare within the run.",
        "",
        "## The audit log",
        "",
        "| request | p50 ms | p90 ms | total |",
        "|---|---:|---:|---:|",
    ]
    pages = [
        "/audit/?perPage=20",
        "/audit/?perPage=20&page=50",
        f"/locations/{LOCATION}/audit/?perPage=20",
        f"/audit/?perPage=20&location={LOCATION}",
        "/audit/?perPage=20&action=vote.update",
    ]
    for path in pages:
        p50, p90, total = timed(client, path, options.requests)
        lines.append(f"| `GET {path}` | {p50:.1f} | {p90:.1f} | {total:,} |")
        print(lines[-1], flush=True)
    with app.app_context():
        from directory_api.platform.extensions import db

        took = []
        for _ in range(5):
            started = time.perf_counter()
            db.session.execute(text("SELECT count(*) FROM audit_entries")).scalar()
            took.append((time.perf_counter() - started) * 1000)
        db.session.rollback()
    lines += [
        "",
        f"For comparison, a `count(*)` of `audit_entries` alone (what a total cost before"
        f" the kept counts): median {statistics.median(took):.0f} ms of 5. A filter the kept"
        " counts do not answer (`action`, `actor`, `since`, `until`) is still counted by a"
        " query, through its index.",
        "",
        "## Retention's batch queries",
        "",
        "Each statement `privacy.run_retention` runs to find its next batch, as it builds it"
        " (values inlined), under `EXPLAIN (ANALYZE, BUFFERS)`: today, with rows due in"
        " every table (the first batch of a first run), and three years ago, with none (the"
        " last look of every run, when everything due is gone).",
    ]
    now = datetime.now(UTC)
    summary = ["", "| table | rows due: ms | none due: ms |", "|---|---:|---:|"]
    details = []
    due = retention_statements(app, now)
    none_due = retention_statements(app, now - timedelta(days=3 * 365))
    for (table, statement), (_, quiet) in zip(due, none_due, strict=True):
        plans = [explain(app, statement), explain(app, quiet)]
        times = [plan.splitlines()[-1].split(": ")[1] for plan in plans]
        summary.append(f"| {table} | {times[0]} | {times[1]} |")
        print(summary[-1], flush=True)
        details += ["", f"### {table}", "", "```sql", statement, "```"]
        for heading, plan in zip(("Rows due:", "None due:"), plans, strict=True):
            details += ["", heading, "", "```", plan, "```"]
    lines += summary + details
    out = ROOT / "bench" / "SCALE.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
