"""Benchmarks: the service under load, side by side with Flask's own ceiling.

    python bench/run.py [--databases sqlite postgresql] [--duration 10]

For each database it seeds a location with 1k and one with 100k businesses (on PostgreSQL
also eight more of 100k, 1M in all), starts gunicorn (2 workers, bench mode: limits off,
/bench/bare on), loads each scenario with wrk from a second process over loopback, and
writes bench/RESULTS.md. Targets are ratios measured in the same run, because absolute
numbers drift on small shared machines.
"""

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))

# Where bench databases are created (a database of that server that always exists).
PG_ADMIN = os.environ.get("BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1/postgres")
PASSWORD = "bench passphrase"  # noqa: S105  (a throwaway account in a throwaway database)
WORDS_A = [
    "golden",
    "silver",
    "harbour",
    "village",
    "corner",
    "little",
    "royal",
    "green",
    "northern",
    "old",
    "new",
    "blue",
    "happy",
    "quiet",
    "bright",
    "urban",
    "coastal",
    "rustic",
    "modern",
    "grand",
]
WORDS_B = [
    "bakery",
    "cafe",
    "kitchen",
    "books",
    "tailors",
    "garage",
    "studio",
    "market",
    "pharmacy",
    "florist",
    "gallery",
    "barber",
    "deli",
    "brewery",
    "print",
    "yoga",
    "bistro",
    "hardware",
    "cycles",
    "optician",
]
SEARCH_TERM = "golden bakery"
VOTE = {
    "yourName": "Bench Voter",
    "yourEmail": "voter@example.org",
    "yourPhone": "+44 1",
    "businessName": "Golden Bakery",
    "businessBranch": "Main",
    "voteBody": "Lovely bread.",
}
TARGETS = [
    # (label, numerator, denominator, metric, comparison, target)
    ("business list page ÷ bare Flask JSON, req/s", "list_1k", "bare", "rps", ">=", 0.5),
    ("list page at 100k ÷ at 1k, p50 latency", "list_100k", "list_1k", "p50", "<=", 1.3),
    ("search at 100k ÷ list page, req/s", "search_100k", "list_1k", "rps", ">=", 0.5),
    ("deep page (page 2000) ÷ first page, p50 latency", "deep_100k", "list_100k", "p50", "<=", 1.5),
    ("vote submission ÷ list page, req/s", "vote", "list_1k", "rps", ">=", 0.7),
    ("signed-in GET /me/ ÷ anonymous GET /regions/, req/s", "me", "regions", "rps", ">=", 0.8),
    # Public vote results read stored counts (API.md 8): as cheap as a list page.
    (
        "vote results at 100k votes ÷ list page, req/s",
        "results_100k",
        "list_100k",
        "rps",
        ">=",
        0.8,
    ),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ensure_tool(name: str) -> str:
    """The path of command `name`, installed from Debian's package of that name if missing."""
    found = shutil.which(name)
    if found:
        return found
    print(f"installing {name} (Debian package)…", flush=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", name], check=True)
    return shutil.which(name) or sys.exit(f"{name} is not available")


def database_url(kind: str, name: str = "bench") -> str:
    """The URL of the bench database `name` on `kind` (a file in bench/out/ for SQLite)."""
    if kind == "sqlite":
        return f"sqlite:///{OUT / name}.sqlite3"
    return PG_ADMIN.rsplit("/", 1)[0] + f"/dirapi_{name}"


def database_urls(kind: str, name: str = "bench") -> str:
    """A fresh, empty bench database `name` on `kind`: its URL."""
    if kind == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{OUT / name}.sqlite3{suffix}").unlink(missing_ok=True)
    else:
        for statement in (
            f"DROP DATABASE IF EXISTS dirapi_{name}",
            f"CREATE DATABASE dirapi_{name}",
        ):
            subprocess.run(["psql", PG_ADMIN, "-qc", statement], check=True)
    return database_url(kind, name)


def seed(database_url: str, *, filler_locations: int) -> None:
    """Migrate and load the bench data straight through SQLAlchemy Core (fast)."""
    from flask_migrate import upgrade
    from sqlalchemy import insert, select, text

    from directory_api import create_app
    from directory_api.credentials import hash_password
    from directory_api.extensions import db
    from directory_api.models import (
        Category,
        Listing,
        ListingSocial,
        Location,
        Region,
        Social,
        User,
    )
    from directory_api.models.listing import recount_listings
    from directory_api.search import fold, search_text
    from directory_api.vote_integrity import recount_votes

    # Seeding a million rows is maintenance, not a request: no statement timeout.
    app = create_app(
        "development",
        SQLALCHEMY_DATABASE_URI=database_url,
        SESSION_FILE_DIR=str(OUT / "sessions"),
        DATABASE_STATEMENT_TIMEOUT=0,
    )
    rng = random.Random(7)
    with app.app_context():
        upgrade()
        region = Region(slug="north", name="North")
        food = Category(slug="food", name="Food")
        cafes = Category(slug="cafes", name="Cafés", parent=food)
        instagram = Social(slug="instagram", name="Instagram", url="https://instagram.com")
        db.session.add_all([region, food, cafes, instagram])
        for slug, name in (("alpha", "Alpha"), ("beta", "Beta"), ("gamma", "Gamma")):
            db.session.add(Region(slug=slug, name=name))
        db.session.add(
            User(email="bench@example.org", password_hash=hash_password(PASSWORD), is_super=True)
        )
        db.session.commit()
        sizes = {"bench-1k": 1_000, "bench-100k": 100_000}
        sizes |= {f"bench-fill-{n}": 100_000 for n in range(filler_locations)}
        now = datetime.now(UTC)
        for slug, size in sizes.items():
            location = Location(
                slug=slug,
                name=slug.replace("-", " ").title(),
                region=region,
                email=f"{slug}@example.org",
            )
            db.session.add(location)
            db.session.commit()
            started = time.monotonic()
            for chunk_start in range(0, size, 5_000):
                rows, links = [], []
                for number in range(chunk_start, min(size, chunk_start + 5_000)):
                    name = f"{rng.choice(WORDS_A).title()} {rng.choice(WORDS_B).title()} {number}"
                    description = "Family run since 1990, open every day."
                    listing_id = uuid.uuid4()
                    rows.append(
                        {
                            "id": listing_id,
                            "kind": "business",
                            "location_id": location.id,
                            "slug": f"b-{number}",
                            "name": name,
                            "subcategory_id": cafes.id,
                            "description": description,
                            "branch": None,
                            "search_name": fold(name),
                            "search_text": search_text(name, None, description, "Cafés"),
                            "created_at": now,
                            "updated_at": now,
                        }
                    )
                    links.append(
                        {
                            "listing_id": listing_id,
                            "social_id": instagram.id,
                            "url": f"https://instagram.com/b{number}",
                            "position": 0,
                        }
                    )
                db.session.execute(insert(Listing.__table__), rows)
                db.session.execute(insert(ListingSocial.__table__), links)
                db.session.commit()
            print(
                f"  seeded {slug}: {size} businesses in {time.monotonic() - started:.0f}s",
                flush=True,
            )
        seed_votes(db.session.scalar(select(Location).where(Location.slug == "bench-100k")), now)
        recount_listings()  # the rows above bypassed the ORM that keeps the counts
        recount_votes()
        db.session.commit()
        db.session.execute(text("ANALYZE"))
        db.session.commit()
        if db.engine.dialect.name == "postgresql":
            with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.execute(text("VACUUM ANALYZE"))
        db.engine.dispose()


def seed_votes(location, now: datetime, employers: int = 200, votes: int = 100_000) -> None:
    """`votes` active employer votes at `location`, spread unevenly over `employers`."""
    from sqlalchemy import insert

    from directory_api.extensions import db
    from directory_api.models import Listing, Vote

    rng = random.Random(11)
    employer_rows = [
        {
            "id": uuid.uuid4(),
            "kind": "employer",
            "location_id": location.id,
            "slug": f"e-{number}",
            "name": f"Employer {number}",
            "search_name": f"employer {number}",
            "search_text": f"employer {number}",
            "created_at": now,
            "updated_at": now,
        }
        for number in range(employers)
    ]
    db.session.execute(insert(Listing.__table__), employer_rows)
    weights = [1 / (rank + 1) for rank in range(employers)]  # a few popular, a long tail
    for chunk_start in range(0, votes, 5_000):
        chosen = rng.choices(employer_rows, weights, k=min(5_000, votes - chunk_start))
        rows = [
            {
                "id": uuid.uuid4(),
                "location_id": location.id,
                "type": "employer",
                "active": True,
                "confirmed": False,
                "employer_id": employer["id"],
                "business_name": employer["name"],
                "vote_body": "Good.",
                "created_at": now,
                "updated_at": now,
            }
            for employer in chosen
        ]
        db.session.execute(insert(Vote.__table__), rows)
    db.session.commit()
    print(f"  seeded {votes} votes over {employers} employers", flush=True)


def queries_per_list(database_url: str) -> dict[int, int]:
    """SQL statements one list request runs, by page size (measured in-process)."""
    from sqlalchemy import event

    from directory_api import create_app
    from directory_api.extensions import db

    app = create_app(
        "development", SQLALCHEMY_DATABASE_URI=database_url, SESSION_FILE_DIR=str(OUT / "sessions")
    )
    statements: list[str] = []
    with app.app_context():
        event.listen(db.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    client = app.test_client()
    counts = {}
    for per_page in (1, 20, 100):
        statements.clear()
        response = client.get(f"/locations/bench-100k/businesses/?perPage={per_page}")
        assert response.status_code == 200, response.get_json()
        counts[per_page] = len(statements)
    return counts


def export_memory(database_url: str) -> dict[str, tuple[int, float]]:
    """Rows and peak Python memory (MiB, tracemalloc) of a CSV export of 1k and of 100k
    businesses, read as a server streams it: flat when the export streams."""
    import tracemalloc

    from directory_api import create_app

    app = create_app(
        "development",
        SQLALCHEMY_DATABASE_URI=database_url,
        SESSION_FILE_DIR=str(OUT / "sessions"),
        DATABASE_STATEMENT_TIMEOUT=0,
    )
    client = app.test_client()
    peaks = {}
    for slug in ("bench-1k", "bench-100k"):
        tracemalloc.start()
        response = client.get(f"/locations/{slug}/businesses/export.csv", buffered=False)
        lines = sum(chunk.count(b"\n") for chunk in response.iter_encoded()) - 1  # header
        response.close()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        peaks[slug] = (lines, peak)
        print(f"  export {slug}: {lines} rows, peak {peak:.1f} MiB", flush=True)
    return peaks


def production_env(database_url: str, kind: str) -> dict[str, str]:
    """The service's production settings on `kind` (SQLite with its per-host state allowed;
    PostgreSQL with Redis), rate limits on; scenarios override what they need."""
    env = {
        **os.environ,
        "APP_ENV": "production",
        "FLASK_APP": "wsgi",
        "SECRET_KEY": "bench-only-3Wq8zK5mX1vB7nR2cT9pL4xY6hJ0aQ",
        "DATABASE_URL": database_url,
        "MAIL_SERVER": "127.0.0.1",
        "SESSION_COOKIE_SECURE": "false",
        "SESSION_FILE_DIR": str(OUT / "sessions"),
    }
    if kind == "sqlite":
        env |= {
            "ALLOW_SQLITE_IN_PRODUCTION": "1",
            "ALLOW_FILE_SESSIONS": "1",
            "ALLOW_MEMORY_RATELIMITS": "1",
        }
    else:
        env |= {
            "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
            "SESSION_KEY_PREFIX": f"bench-{uuid.uuid4().hex[:6]}:",
        }
    return env


def start_server(database_url: str, kind: str, port: int) -> subprocess.Popen:
    env = production_env(database_url, kind) | {
        "BENCH_MODE": "1",
        "RATELIMIT_ENABLED": "false",
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
    }
    log = (OUT / f"gunicorn-{kind}.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return process
        except OSError:
            time.sleep(0.2)
    process.terminate()
    sys.exit(f"gunicorn did not start; see {log.name}")


def sign_in(port: int) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/auth/login",
        data=json.dumps({"email": "bench@example.org", "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return response.headers["Set-Cookie"].split(";")[0]


UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def run_wrk(
    wrk: str, url: str, duration: int, *, script: Path | None = None, headers: tuple[str, ...] = ()
) -> dict[str, float]:
    command = [wrk, "-t1", "-c4", f"-d{duration}s", "--latency", url]
    for header in headers:
        command[1:1] = ["-H", header]
    if script:
        command[1:1] = ["-s", str(script)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    latency = {
        int(p): float(v) * UNITS[u]
        for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
    }
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if errors:
        sys.exit(f"{url}: {errors.group(1)} error responses\n{output}")
    return {"rps": rps, "p50": latency[50], "p99": latency[99]}


def bench_database(kind: str, wrk: str, duration: int) -> dict:
    print(f"== {kind}", flush=True)
    url = database_urls(kind)
    seed(url, filler_locations=8 if kind == "postgresql" else 0)
    queries = queries_per_list(url)
    exports = export_memory(url)
    port = free_port()
    server = start_server(url, kind, port)
    try:
        base = f"http://127.0.0.1:{port}"
        cookie = sign_in(port)
        vote_script = OUT / "vote.lua"
        vote_script.write_text(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = {json.dumps(json.dumps(VOTE))}\n"
        )
        term = SEARCH_TERM.replace(" ", "%20")
        scenarios = {
            "bare": (f"{base}/bench/bare", {}),
            "regions": (f"{base}/regions/", {}),
            "list_1k": (f"{base}/locations/bench-1k/businesses/?perPage=20", {}),
            "list_100k": (f"{base}/locations/bench-100k/businesses/?perPage=20", {}),
            "deep_100k": (f"{base}/locations/bench-100k/businesses/?perPage=20&page=2000", {}),
            "search_100k": (f"{base}/locations/bench-100k/businesses/search/{term}", {}),
            "me": (f"{base}/me/", {"headers": (f"Cookie: {cookie}",)}),
            "vote": (f"{base}/locations/bench-1k/votes/submit/btoc", {"script": vote_script}),
            "results_100k": (f"{base}/locations/bench-100k/votes/results", {}),
        }
        results = {}
        for name, (target, options) in scenarios.items():
            run_wrk(wrk, target, 2, **options)  # warm up
            results[name] = run_wrk(wrk, target, duration, **options)
            r = results[name]
            print(
                f"  {name:12} {r['rps']:8.0f} req/s  p50 {r['p50']:6.2f} ms  "
                f"p99 {r['p99']:6.2f} ms",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {"scenarios": results, "queries": queries, "exports": exports}


def ratio_rows(results: dict) -> list[str]:
    rows = []
    scenarios = results["scenarios"]
    for label, top, bottom, metric, comparison, target in TARGETS:
        value = scenarios[top][metric] / scenarios[bottom][metric]
        met = value >= target if comparison == ">=" else value <= target
        rows.append(
            f"| {label} | {value:.2f} | {comparison} {target} | {'met' if met else '**not met**'} |"
        )
    queries = results["queries"]
    constant = len(set(queries.values())) == 1
    per_page = ", ".join(f"perPage {k}: {v}" for k, v in queries.items())
    rows.append(
        f"| SQL queries per list request | {per_page} | constant in perPage | "
        f"{'met' if constant else '**not met**'} |"
    )
    (small_rows, small_peak), (large_rows, large_peak) = results["exports"].values()
    flat = large_peak <= 1.5 * small_peak
    rows.append(
        f"| CSV export peak memory, {large_rows} ÷ {small_rows} rows | {large_peak:.1f} MiB ÷ "
        f"{small_peak:.1f} MiB = {large_peak / small_peak:.2f} | <= 1.5 (flat) | "
        f"{'met' if flat else '**not met**'} |"
    )
    return rows


def write_results(all_results: dict[str, dict], duration: int) -> Path:
    lines = [
        "# Benchmark results",
        "",
        f"`make bench` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores: "
        "gunicorn with 2 gthread workers (8 threads each), "
        f"wrk (1 thread, 4 connections, {duration} s per scenario after a 2 s warm-up) "
        "on loopback. Ratios compare scenarios of the same run.",
        "",
    ]
    for kind, results in all_results.items():
        lines += [f"## {kind}", "", "| scenario | req/s | p50 ms | p99 ms |", "|---|---|---|---|"]
        for name, r in results["scenarios"].items():
            lines.append(f"| {name} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} |")
        lines += ["", "| ratio | measured | target | |", "|---|---|---|---|"]
        lines += ratio_rows(results)
        lines.append("")
    path = ROOT / "bench" / "RESULTS.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--databases", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"]
    )
    parser.add_argument("--duration", type=int, default=10, help="seconds per scenario")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    wrk = ensure_tool("wrk")
    results = {kind: bench_database(kind, wrk, args.duration) for kind in args.databases}
    print(f"wrote {write_results(results, args.duration)}")


if __name__ == "__main__":
    main()
