"""Benchmarks: the service under load, side by side with a bare Flask app (issue 19).

    python bench/run.py [--databases sqlite postgresql] [--duration 5] [--rounds 3]

For each database it seeds (once, kept; `--reseed`) a location with 1k and one with 100k
businesses and 100k employer votes (on PostgreSQL also eight more of 100k, 1M in all),
starts the service under gunicorn in production settings with rate limits on, and beside
it the separate bare Flask app of bench/bare_app.py under the same gunicorn settings, the
write anchor of bench/bare_write_app.py and PocketBase (bench/pocketbase.py), then loads
each scenario with wrk from a second process over loopback, in rounds of A/B pairs (the
bare app, then the scenario). Writes bench/RESULTS.md: ratios to the bare app and
between scenarios, each the median over the rounds, because absolute numbers drift on a
small shared machine; and the table of bench/INSTRUCTIONS.md (`make bench-instructions`).
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
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))
from bench import pocketbase, proc  # after the path: it runs as a script

# The Redis of the service's sessions and limits on PostgreSQL.
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
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
# An employer vote (the public's kind that is stored, checked for duplicates and counted).
VOTE = {
    "yourName": "Bench Voter",
    "yourEmail": "voter@example.org",
    "yourPhone": "+44 1",
    "yourPosition": "Baker",
    "businessName": "Employer 0",
    "businessBranch": "Main",
    "employer": "e-0",
    "voteBody": "A good place to work.",
}


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
    from sqlalchemy import select, text

    from directory_api import create_app
    from directory_api.credentials import hash_password
    from directory_api.listing_pages import store_missing_outputs
    from directory_api.models import (
        Category,
        Location,
        Region,
        Social,
        User,
    )
    from directory_api.models.listing import recount_listings
    from directory_api.platform.extensions import db
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
                numbers = range(chunk_start, min(size, chunk_start + 5_000))
                insert_businesses(
                    db.session,
                    location.id,
                    cafes,
                    instagram,
                    numbers,
                    now,
                    name_of=lambda number: bench_name(rng, number),
                )
                db.session.commit()
            print(
                f"  seeded {slug}: {size} businesses in {time.monotonic() - started:.0f}s",
                flush=True,
            )
        seed_votes(db.session.scalar(select(Location).where(Location.slug == "bench-100k")), now)
        recount_listings()  # the rows above bypassed the ORM that keeps the counts
        recount_votes()
        db.session.commit()
        started = time.monotonic()
        stored = store_missing_outputs(batch=10_000)  # past the ORM that stores them too
        print(f"  stored {stored} listings' outputs in {time.monotonic() - started:.0f}s")
        db.session.execute(text("ANALYZE"))
        db.session.commit()
        if db.engine.dialect.name == "postgresql":
            with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.execute(text("VACUUM ANALYZE"))
        db.engine.dispose()


def bench_name(rng: random.Random, number: int) -> str:
    """A business name of two words (the searches' vocabulary) and its number."""
    return f"{rng.choice(WORDS_A).title()} {rng.choice(WORDS_B).title()} {number}"


def insert_businesses(
    session, location_id, subcategory, social, numbers, now: datetime, *, name_of
) -> None:
    """Businesses numbered `numbers` at a location, each in `subcategory` with one link to
    `social`, inserted past the ORM (rows through it would take minutes): their search
    columns filled as the ORM would (search.py). Counts and revisions are the caller's to
    recount (`recount_listings`). Also the seed of tests/test_server.py's export test."""
    from sqlalchemy import insert

    from directory_api.models import Listing, ListingSocial
    from directory_api.search import fold, search_text

    description = "Family run since 1990, open every day."
    rows, links = [], []
    for number in numbers:
        name = name_of(number)
        listing_id = uuid.uuid4()
        rows.append(
            {
                "id": listing_id,
                "kind": "business",
                "location_id": location_id,
                "slug": f"b-{number}",
                "name": name,
                "subcategory_id": subcategory.id,
                "description": description,
                "branch": None,
                "search_name": fold(name),
                "search_text": search_text(name, None, description, subcategory.name),
                "created_at": now,
                "updated_at": now,
            }
        )
        links.append(
            {
                "listing_id": listing_id,
                "social_id": social.id,
                "url": f"https://instagram.com/b{number}",
                "position": 0,
            }
        )
    session.execute(insert(Listing.__table__), rows)
    session.execute(insert(ListingSocial.__table__), links)


def seed_votes(location, now: datetime, employers: int = 200, votes: int = 100_000) -> None:
    """`votes` active employer votes at `location`, spread unevenly over `employers`."""
    from sqlalchemy import insert

    from directory_api.models import Listing, Vote
    from directory_api.platform.extensions import db

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
                # Voters' address hashes, a few votes each, as real data would have them
                # (the planner's statistics follow; the values need not be real hashes).
                "email_hash": f"{rng.randrange(votes // 3):064x}",
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
    """SQL statements one list request runs, by page size (measured in-process; each
    asked once, so the page's work)."""
    from sqlalchemy import Engine, event

    from directory_api import create_app

    app = create_app(
        "development", SQLALCHEMY_DATABASE_URI=database_url, SESSION_FILE_DIR=str(OUT / "sessions")
    )
    statements: list[str] = []

    def record(*args: object) -> None:
        statements.append(args[2])

    # Every engine: on PostgreSQL reads have their own (directory_api/platform/reads.py). Removed
    # after: left on, it kept every later statement of this process (the export's, whose
    # memory is measured next: 2.5 MiB more at 100k rows, on PostgreSQL).
    event.listen(Engine, "before_cursor_execute", record)
    try:
        client = app.test_client()
        counts = {}
        for per_page in (1, 20, 100):
            statements.clear()
            response = client.get(f"/locations/bench-100k/businesses/?perPage={per_page}")
            assert response.status_code == 200, response.get_json()
            counts[per_page] = len(statements)
    finally:
        event.remove(Engine, "before_cursor_execute", record)
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


def bulk_moderation(database_url: str, requests: int = 20) -> dict[str, float]:
    """Wall time of a bulk action on 500 votes by ids (API.md 15), in-process: the 500
    votes are deactivated and activated again in turn (each request changes all 500, with
    their audit entries and stored counts), and the summary at 100k votes is read after
    each. p50 and max in ms; the votes end as they started (active)."""
    from sqlalchemy import select

    from directory_api import create_app
    from directory_api.models import Location, Vote
    from directory_api.platform.extensions import db

    app = create_app(
        "development", SQLALCHEMY_DATABASE_URI=database_url, SESSION_FILE_DIR=str(OUT / "sessions")
    )
    with app.app_context():
        location = db.session.scalar(select(Location.id).where(Location.slug == "bench-100k"))
        ids = db.session.scalars(
            select(Vote.id)
            .where(Vote.location_id == location, Vote.active.is_(True))
            .order_by(Vote.id)
            .limit(500)
        ).all()
        db.session.rollback()
    client = app.test_client()
    signed = client.post("/auth/login", json={"email": "bench@example.org", "password": PASSWORD})
    assert signed.status_code == 200, signed.get_json()
    times: list[float] = []
    summaries: list[float] = []
    for number in range(requests):
        action = "deactivate" if number % 2 == 0 else "activate"
        body = {"ids": [str(vote_id) for vote_id in ids], "action": action}
        started = time.perf_counter()
        response = client.post("/locations/bench-100k/votes/bulk", json=body)
        times.append((time.perf_counter() - started) * 1000)
        assert response.get_json()["changed"] == 500, response.get_json()
        started = time.perf_counter()
        assert client.get("/locations/bench-100k/votes/summary").status_code == 200
        summaries.append((time.perf_counter() - started) * 1000)
    result = {
        "bulk_500_p50_ms": median(times),
        "bulk_500_max_ms": max(times),
        "summary_100k_p50_ms": median(summaries),
    }
    print(
        f"  bulk action on 500 votes: p50 {result['bulk_500_p50_ms']:.0f} ms "
        f"(max {result['bulk_500_max_ms']:.0f}); summary at 100k votes p50 "
        f"{result['summary_100k_p50_ms']:.1f} ms",
        flush=True,
    )
    return result


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
            "REDIS_URL": REDIS_URL,
            "SESSION_KEY_PREFIX": f"bench-{uuid.uuid4().hex[:6]}:",
        }
    return env


def start_gunicorn(app: str, env: dict[str, str], port: int, log_name: str) -> subprocess.Popen:
    """gunicorn with the service's own settings file (stock gthread, 2 processes), serving
    `app` (the service, or the bare Flask app beside it) on `port`."""
    env = env | {"GUNICORN_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "2"}
    log = (OUT / log_name).open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", app],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    probe = "/items/" if app.startswith("bench.") else "/health"
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe}", timeout=2):
                return process
        except OSError:
            time.sleep(0.2)
    process.terminate()
    sys.exit(f"gunicorn did not start {app}; see {log.name}")


def limits_on(database_url: str, kind: str) -> dict[str, str]:
    """Production settings with rate limits on; the vote allowances (per IP, per location)
    are raised so that the load is measured, not the 429 (their checks run all the same)."""
    return production_env(database_url, kind) | {
        "RATELIMIT_ENABLED": "true",
        "RATELIMIT_VOTES_PER_IP": "100000000/hour",
        "VOTE_LIMIT_PER_LOCATION": "100000000/hour",
    }


def sign_in(port: int, path: str = "/auth/login") -> str:
    """A session cookie for the bench's user: the service's sign-in, or the floor app's
    (bench/floor_app.py, whose path takes the address alone)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps({"email": "bench@example.org", "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return response.headers["Set-Cookie"].split(";")[0]


def etag_of(url: str) -> str:
    with urllib.request.urlopen(url) as response:
        return response.headers["ETag"]


UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def database_servers(database_url: str) -> tuple[int, ...]:
    """The main processes of the PostgreSQL server that holds `database_url` (the parent of
    the backend a connection gets) and of the Redis server the service uses: as process
    trees (`proc.tree_seconds`), their backends count, those that ended included."""
    import psycopg
    import redis

    with psycopg.connect(database_url) as db:  # its backend is read while it is there
        server = proc.parent_of(db.execute("SELECT pg_backend_pid()").fetchone()[0])
    store = redis.Redis.from_url(REDIS_URL)
    return server, int(store.info("server")["process_id"])


# wrk's connections are kept alive, and gunicorn's workers race to accept them when wrk
# starts: all four land on one worker in about one run in eight, which serves them alone
# (one core for the whole load, its threads contending for one GIL): bare Flask measured
# 1,100-1,400 req/s so and 2,000-3,200 otherwise, CPU 0.80-0.98 ms a request against
# 0.55-0.82 (bench/WALLTIME.md, section 6). Production never meets that: nginx opens a
# connection a request (deploy/nginx.conf, no upstream keepalive). Such a run is started
# again, PLACEMENT_SETTLES seconds in, up to PLACEMENT_TRIES times in all.
PLACEMENT_SETTLES = 0.5
PLACEMENT_TRIES = 5


def placed(result: dict[str, Any]) -> str:
    """Where a run's connections landed, and on which try (`run_wrk`), for the log."""
    tries = result["tries"]
    return result["spread"] + (f", try {tries}" if tries > 1 else "")


def run_wrk(
    wrk: str,
    url: str,
    duration: int,
    server: int | None = None,
    *,
    databases: tuple[int, ...] = (),
    script: Path | None = None,
    headers: tuple[str, ...] = (),
) -> dict[str, Any]:
    """wrk against `url`: req/s and latencies; given the process `server` that serves it,
    also the CPU milliseconds per request spent by the server's processes and by those of
    the database servers whose main processes `databases` names (`database_servers`), and
    how wrk's connections were spread over its workers (`spread`, e.g. "3+1"; a run with
    all of them on one worker is run again)."""
    command = [wrk, "-t1", "-c4", f"-d{duration}s", "--latency", url]
    for header in headers:
        command[1:1] = ["-H", header]
    if script:
        command[1:1] = ["-s", str(script)]

    counted = (server, *databases) if server is not None else ()
    port = urlsplit(url).port
    for attempt in range(1, PLACEMENT_TRIES + 1):
        before = sum(proc.tree_seconds(pid) for pid in counted)
        load = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        time.sleep(PLACEMENT_SETTLES)
        spread = proc.connections_by_worker(server, port) if server is not None else []
        if len(spread) > 1 and spread[0] == sum(spread) > 0 and attempt < PLACEMENT_TRIES:
            load.kill()  # every connection on one worker: not how production is loaded
            load.wait()
            continue
        output, _ = load.communicate()
        if load.returncode:
            sys.exit(f"{url}: wrk failed ({load.returncode})\n{output}")
        break
    cpu = sum(proc.tree_seconds(pid) for pid in counted) - before
    served = re.search(r"(\d+) requests in", output)
    requests = int(served.group(1)) if served else 0
    if not requests or (server is not None and cpu <= 0):
        sys.exit(f"{url}: no requests served or no CPU time counted\n{output}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    latency = {
        int(p): float(v) * UNITS[u]
        for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
    }
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if errors:
        sys.exit(f"{url}: {errors.group(1)} error responses\n{output}")
    return {
        "rps": rps,
        "p50": latency[50],
        "p99": latency[99],
        "cpu": 1000 * cpu / requests,
        "spread": "+".join(map(str, spread)) or "-",
        "tries": attempt,
    }


def scenarios(
    service: str, bare: str, cookie: str, writes: str, peer: str, floor: str, floor_cookie: str
) -> dict[str, tuple[str, dict]]:
    """Each scenario's URL and wrk options."""
    vote_script = OUT / "vote.lua"
    vote_script.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {json.dumps(json.dumps(VOTE))}\n"
    )
    first = f"{service}/locations/bench-1k/businesses/?perPage=20"
    term = SEARCH_TERM.replace(" ", "%20")
    return {
        "bare_flask": (f"{bare}/items/", {}),
        "regions": (f"{service}/regions/", {}),
        "list_1k": (first, {}),
        "list_100k": (f"{service}/locations/bench-100k/businesses/?perPage=20", {}),
        "deep_100k": (f"{service}/locations/bench-100k/businesses/?perPage=20&page=2000", {}),
        "search_100k": (f"{service}/locations/bench-100k/businesses/search/{term}", {}),
        # The pages above asked again are answered from what each process kept
        # (caching.py); these are the same pages by URLs not asked before: their work.
        **{name: fresh(name, service) for name in FRESH},
        # PocketBase's page of the same 1,000 businesses (bench/pocketbase.py), right after
        # the service's fresh list page in each round: PocketBase keeps no answers.
        "pocketbase_list": (f"{peer}{pocketbase.LIST}", {}),
        # The stack's floor for that page (bench/floor_app.py): one statement through
        # Flask-SQLAlchemy, the page's stored outputs joined.
        "floor_list": fresh("list_1k_fresh", floor),
        "revalidate_1k": (first, {"headers": (f"If-None-Match: {etag_of(first)}",)}),
        "me": (f"{service}/me/", {"headers": (f"Cookie: {cookie}",)}),
        # The write anchor (bench/bare_write_app.py) stores the vote's body as one row,
        # right before the vote in each round: the vote's second ratio is to it.
        "bare_write": (f"{writes}/writes/", {"script": vote_script}),
        "vote": (f"{service}/locations/bench-100k/votes/submit/employer", {"script": vote_script}),
        # The stack's floor (bench/floor_app.py): the same vote and /me with the libraries
        # this service must use and none of its own code.
        "floor_vote": (
            f"{floor}/locations/bench-100k/votes/submit/employer",
            {"script": vote_script},
        ),
        "floor_me": (f"{floor}/me/", {"headers": (f"Cookie: {floor_cookie}",)}),
        "results_100k": (f"{service}/locations/bench-100k/votes/results", {}),
    }


# The pages the `_fresh` scenarios ask, each by a URL not asked lately: the path before
# the page number, and the page (the deep one from its remembered start: those are kept
# by page number, not by its spelling).
_LIST_100K = "/locations/bench-100k/businesses/?perPage=20&page="
FRESH = {
    "list_1k_fresh": ("/locations/bench-1k/businesses/?perPage=20&page=", 1),
    "list_100k_fresh": (_LIST_100K, 1),
    "deep_100k_fresh": (_LIST_100K, 2000),
    "search_100k_fresh": (
        f"/locations/bench-100k/businesses/search/{SEARCH_TERM.replace(' ', '%20')}?page=",
        1,
    ),
}
FRESH_URLS = 1000  # asked in turn: a worker meets far more than it keeps (ANSWERS_KEPT)


def fresh_path(name: str, padding: int) -> str:
    """The path of fresh scenario `name` with its page number padded with `padding` zeros."""
    prefix, page = FRESH[name]
    return f"{prefix}{'0' * padding}{page}"


def fresh(name: str, service: str) -> tuple[str, dict]:
    """Fresh scenario `name` for wrk: the number of zeros changes every request, through
    FRESH_URLS spellings in turn."""
    prefix, page = FRESH[name]
    script = OUT / f"{name}.lua"
    script.write_text(
        "local n = 0\n"
        "request = function()\n"
        f"  n = (n + 1) % {FRESH_URLS}\n"
        f'  return wrk.format(nil, "{prefix}" .. string.rep("0", n) .. "{page}")\n'
        "end\n"
    )
    return service, {"script": script}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def bench_database(kind: str, wrk: str, duration: int, rounds: int, reseed: bool) -> dict:
    """Rounds of A/B pairs: each scenario right after a run of the bare Flask app, so each
    ratio compares two runs a few seconds apart; the reported ratio is the rounds' median."""
    print(f"== {kind}", flush=True)
    url = seeded(kind, reseed)
    queries = queries_per_list(url)
    exports = export_memory(url)
    moderation = bulk_moderation(url)
    env = limits_on(url, kind)
    service_port, bare_port, writes_port, peer_port, floor_port = (free_port() for _ in range(5))
    peer = pocketbase.start(peer_port, f"pocketbase-{kind}.log")
    service = start_gunicorn("wsgi:app", env, service_port, f"gunicorn-{kind}.log")
    bare = start_gunicorn("bench.bare_app:app", env, bare_port, f"gunicorn-bare-{kind}.log")
    from bench.bare_write_app import create_table

    create_table(url)
    writes = start_gunicorn(
        "bench.bare_write_app:app", env, writes_port, f"gunicorn-bare-write-{kind}.log"
    )
    from bench.floor_app import create_table as create_floor_table

    create_floor_table(url)
    floor = start_gunicorn(
        "bench.floor_app:create_floor_app()", env, floor_port, f"gunicorn-floor-{kind}.log"
    )
    runs: dict[str, list[dict[str, Any]]] = {}
    paired: dict[str, list[float]] = {}
    by_cpu: dict[str, list[float]] = {}
    # Which process serves each port: its CPU time is counted for each run against it, and
    # on PostgreSQL the database servers' for the two that use them (the service, the write
    # anchor). Not for the bare app or PocketBase: what PostgreSQL does after a scenario's
    # run (its checkpointer, autovacuum) would be charged to them.
    uses_database = {service_port, writes_port, floor_port} if kind == "postgresql" else set()
    databases = database_servers(url) if uses_database else ()
    servers = {
        port: process.pid
        for port, process in (
            (service_port, service),
            (bare_port, bare),
            (writes_port, writes),
            (peer_port, peer),
            (floor_port, floor),
        )
    }
    try:
        pocketbase.seed(f"http://127.0.0.1:{peer_port}", pocketbase.bench_names())
        ports = (service_port, bare_port, writes_port, peer_port, floor_port)
        service_url, bare_url, writes_url, peer_url, floor_url = (
            f"http://127.0.0.1:{port}" for port in ports
        )
        cases = scenarios(
            service_url,
            bare_url,
            sign_in(service_port),
            writes_url,
            peer_url,
            floor_url,
            sign_in(floor_port, "/floor/sign-in"),
        )
        ceiling_url, _ = cases["bare_flask"]

        def load(target: str, seconds: int, **options: object) -> dict[str, Any]:
            port = urlsplit(target).port
            counted = databases if port in uses_database else ()
            return run_wrk(wrk, target, seconds, servers[port], databases=counted, **options)

        for target, options in cases.values():
            load(target, 2, **options)  # warm up
        for round_number in range(1, rounds + 1):
            for name, (target, options) in cases.items():
                if name == "bare_flask":
                    continue
                ceiling = load(ceiling_url, duration)
                result = load(target, duration, **options)
                runs.setdefault("bare_flask", []).append(ceiling)
                runs.setdefault(name, []).append(result)
                paired.setdefault(name, []).append(result["rps"] / ceiling["rps"])
                by_cpu.setdefault(name, []).append(ceiling["cpu"] / result["cpu"])
                print(
                    f"  round {round_number} {name:14} {result['rps']:8.0f} req/s "
                    f"(bare {ceiling['rps']:6.0f}: {paired[name][-1]:.2f})  "
                    f"p50 {result['p50']:6.2f} ms  CPU {result['cpu']:.3f} ms "
                    f"(bare {ceiling['cpu']:.3f}: {by_cpu[name][-1]:.2f})  "
                    f"connections {placed(result)} (bare {placed(ceiling)})",
                    flush=True,
                )
    finally:
        for server in (service, bare, writes, peer, floor):
            server.terminate()
            server.wait(timeout=30)
    summary = {
        name: {
            metric: median([r[metric] for r in results]) for metric in ("rps", "p50", "p99", "cpu")
        }
        for name, results in runs.items()
    }
    by_round = {name: results for name, results in runs.items()}
    return {
        "scenarios": summary,
        "to_bare": {name: median(values) for name, values in paired.items()},
        "to_bare_cpu": {name: median(values) for name, values in by_cpu.items()},
        "p50_ratio": {
            # Latency ratios of two scenarios of the same round, then the median.
            f"{top}/{bottom}": median(
                [a["p50"] / b["p50"] for a, b in zip(by_round[top], by_round[bottom], strict=True)]
            )
            for top, bottom in (
                ("deep_100k_fresh", "list_100k_fresh"),
                ("list_100k_fresh", "list_1k_fresh"),
            )
        }
        | {
            f"{top}/{bottom}": median(
                [a["rps"] / b["rps"] for a, b in zip(by_round[top], by_round[bottom], strict=True)]
            )
            for top, bottom in PAIRS
        },
        # The same pairs by CPU time per request: the first's capacity ÷ the second's.
        "cpu_ratio": {
            f"{top}/{bottom}": median(
                [b["cpu"] / a["cpu"] for a, b in zip(by_round[top], by_round[bottom], strict=True)]
            )
            for top, bottom in PAIRS
        },
        "queries": queries,
        "exports": exports,
        "moderation": moderation,
    }


# Scenarios compared in the same round, req/s to req/s, then the median: the fresh list page
# (and its floor) to PocketBase's, the vote (and its floor) to the write anchor's, and time
# per request of the 304 to the page's work (1 / req/s).
PAIRS = (
    ("list_1k_fresh", "pocketbase_list"),
    ("floor_list", "pocketbase_list"),
    ("vote", "bare_write"),
    ("floor_vote", "bare_write"),
    ("list_1k_fresh", "revalidate_1k"),
)

# (label, what, target, comparison): `what` names a ratio to the bare app (req/s), one of
# PAIRS, or a latency ratio of two scenarios.
TARGETS = [
    # "its work": a page by a URL not asked before; "asked again": answered from what the
    # process kept of its last answer (caching.py), after the one statement of its revision.
    ("business list page (20 items), its work ÷ bare Flask, req/s", "list_1k_fresh", ">=", 0.6),
    ("business list page (20 items), asked again ÷ bare Flask, req/s", "list_1k", ">=", 0.6),
    ("`GET /regions/` ÷ bare Flask, req/s", "regions", ">=", 0.7),
    (
        "deep page (page 2000 of 100k, from its remembered start) ÷ first page, their work, p50",
        "deep_100k_fresh/list_100k_fresh",
        "<=",
        1.3,
    ),
    ("search at 100k, its work ÷ bare Flask, req/s", "search_100k_fresh", ">=", 0.3),
    ("search at 100k, asked again ÷ bare Flask, req/s", "search_100k", ">=", 0.3),
    ("signed-in `GET /me/` ÷ bare Flask, req/s", "me", ">=", 0.55),
    ("vote submission (employer) ÷ bare Flask, req/s", "vote", ">=", 0.35),
    # The stack's floor against the same targets: where it misses one, so must the service.
    (
        "the stack's floor for `/me/` (bench/floor_app.py) ÷ bare Flask, req/s",
        "floor_me",
        ">=",
        0.55,
    ),
    (
        "the stack's floor for a vote (bench/floor_app.py) ÷ bare Flask, req/s",
        "floor_vote",
        ">=",
        0.35,
    ),
    (
        "the stack's floor for a fresh list page (bench/floor_app.py) ÷ bare Flask, req/s",
        "floor_list",
        ">=",
        0.6,
    ),
    (
        "fresh list page (1k, 20 by name, with the total) ÷ PocketBase's, req/s",
        "list_1k_fresh/pocketbase_list",
        ">=",
        1.0,
    ),
    (
        "the stack's floor for that page ÷ PocketBase's, req/s",
        "floor_list/pocketbase_list",
        ">=",
        1.0,
    ),
    (
        "vote submission ÷ the write anchor (one row, one commit), req/s",
        "vote/bare_write",
        ">=",
        0.6,
    ),
    (
        "the stack's floor for a vote ÷ the write anchor, req/s",
        "floor_vote/bare_write",
        ">=",
        0.6,
    ),
    ("list at 100k ÷ at 1k, their work, p50", "list_100k_fresh/list_1k_fresh", "<=", 1.2),
    # The target is on what the app spends (instructions); wall time through gunicorn and
    # HTTP includes their fixed cost per request, the same for both.
    (
        "304 revalidation ÷ the list page's work, instructions",
        "revalidate_1k/list_1k_fresh M",
        "<",
        0.25,
    ),
    (
        "304 revalidation ÷ the list page's work, time per request",
        "list_1k_fresh/revalidate_1k",
        None,
        None,
    ),
    ("vote results at 100k votes ÷ bare Flask, req/s", "results_100k", None, None),
]


def instructions_of(kind: str) -> dict[str, float]:
    """M instructions per request of each scenario on `kind`, from bench/INSTRUCTIONS.md."""
    path = ROOT / "bench" / "INSTRUCTIONS.md"
    if not path.exists():
        return {}
    lines = path.read_text().partition("## History")[0].splitlines()
    header = next((line for line in lines if line.startswith("| scenario |")), "")
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    if f"{kind} M" not in columns:
        return {}
    at = columns.index(f"{kind} M")
    table = {}
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == len(columns) and cells[at].replace(".", "", 1).isdigit():
            table[cells[0]] = float(cells[at])
    return table


def ratio_rows(kind: str, results: dict) -> list[str]:
    rows = []
    counted = instructions_of(kind)
    if "revalidate_1k" in counted and "list_1k_fresh" in counted:
        results["p50_ratio"]["revalidate_1k/list_1k_fresh M"] = (
            counted["revalidate_1k"] / counted["list_1k_fresh"]
        )
    for label, what, comparison, target in TARGETS:
        value = results["to_bare"].get(what, results["p50_ratio"].get(what))
        by_cpu = results["to_bare_cpu"].get(what, results["cpu_ratio"].get(what))
        cpu = f"{by_cpu:.2f}" if by_cpu is not None else ""
        if value is None:
            rows.append(f"| {label} | (not measured) | | | |")
            continue
        if isinstance(target, dict):
            target = target[kind]
        if target is None:
            rows.append(f"| {label} | {value:.2f} | {cpu} | (no target) | |")
            continue
        met = {">=": value >= target, "<=": value <= target, "<": value < target}[comparison]
        rows.append(
            f"| {label} | {value:.2f} | {cpu} | {comparison} {target} | "
            f"{'met' if met else '**not met**'} |"
        )
    queries = results["queries"]
    per_page = ", ".join(f"perPage {k}: {v}" for k, v in queries.items())
    rows.append(f"| SQL statements per list request | {per_page} | | | |")
    (small_rows, small_peak), (large_rows, large_peak) = results["exports"].values()
    rows.append(
        f"| CSV export peak memory, {large_rows} ÷ {small_rows} rows | {large_peak:.1f} MiB ÷ "
        f"{small_peak:.1f} MiB = {large_peak / small_peak:.2f} | | flat | "
        f"{'met' if large_peak <= 1.5 * small_peak else '**not met**'} |"
    )
    moderation = results["moderation"]
    rows.append(
        "| bulk action on 500 votes by ids (in-process, deactivate and activate in turn), "
        f"p50 | {moderation['bulk_500_p50_ms']:.0f} ms (max "
        f"{moderation['bulk_500_max_ms']:.0f} ms) | | (no target) | |"
    )
    rows.append(
        "| moderation summary at 100k votes (in-process), p50 | "
        f"{moderation['summary_100k_p50_ms']:.1f} ms | | (instructions: bench/INSTRUCTIONS.md) | |"
    )
    return rows


def write_results(all_results: dict[str, dict], duration: int, rounds: int) -> Path:
    lines = [
        "# Benchmark results",
        "",
        f"`make bench` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores. "
        "The service runs in production settings with rate limits on (PostgreSQL with Redis "
        "sessions and limits), under gunicorn with its own settings (2 gthread workers); "
        "the ceiling, bench/bare_app.py, is a separate minimal Flask app answering the same "
        "20 items, under the same gunicorn settings beside it. wrk: 1 thread, 4 connections, "
        f"{duration} s per run on loopback; a run whose 4 connections all landed on one "
        "worker is started again (`PLACEMENT_TRIES`: production's nginx opens a connection "
        "a request, and never loads one worker alone; bench/WALLTIME.md, section 6). "
        f"{rounds} rounds; in each, every scenario runs "
        "right after a run of the bare app, and its ratio is to that run. Figures are the "
        "rounds' medians. A scenario named `_fresh` asks its page by a URL no request used "
        "lately (the page number zero-padded anew each time): it measures the page's work. "
        "The others ask one URL again and again, and are answered from what each process "
        "kept of its last answer (caching.py) after the one statement of the list's "
        "revision.",
        "",
        "CPU ms/request is the CPU time (user and system) the server's processes spent during "
        "the run, divided by the requests served: gunicorn's master, its workers, and the "
        "workers it recycled (max_requests) with their start-up. Its ratio to the bare "
        "app's is bare ÷ scenario. It does not count a core left idle, but it moves too "
        "between runs (bench/WALLTIME.md). On PostgreSQL the service's and the write "
        "anchor's also count what the PostgreSQL server (its main process, its backends, "
        "those that ended too) and Redis spent during the run (bench/proc.py): every "
        "figure holds its database's work, PocketBase's SQLite being in its own process. "
        "The bare app's and PocketBase's do not count those servers (they use neither), so "
        "work PostgreSQL does after a scenario's run is charged to no one. Anything else "
        "using the same servers meanwhile would be counted: the machine must be quiet. "
        "On SQLite the database is in the server's process.",
        "",
    ]
    for kind, results in all_results.items():
        lines += [
            f"## {kind}",
            "",
            "| scenario | req/s | ÷ bare Flask | p50 ms | p99 ms | CPU ms/request | "
            "÷ bare Flask, by CPU |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in results["scenarios"].items():
            ratio, by_cpu = results["to_bare"].get(name), results["to_bare_cpu"].get(name)
            shown = f"{ratio:.2f}" if ratio is not None else ""
            shown_cpu = f"{by_cpu:.2f}" if by_cpu is not None else ""
            lines.append(
                f"| {name} | {r['rps']:.0f} | {shown} | {r['p50']:.2f} | {r['p99']:.2f} | "
                f"{r['cpu']:.3f} | {shown_cpu} |"
            )
        lines += [
            "",
            "| ratio | measured | by CPU time | target | |",
            "|---|---|---|---|---|",
        ]
        lines += ratio_rows(kind, results)
        lines.append("")
    instructions = ROOT / "bench" / "INSTRUCTIONS.md"
    if instructions.exists():
        table = instructions.read_text().partition("## History")[0].strip().splitlines()
        lines += ["## Instructions per request (from bench/INSTRUCTIONS.md)", "", *table[2:], ""]
    path = ROOT / "bench" / "RESULTS.md"
    path.write_text("\n".join(lines))
    return path


def seeded(kind: str, reseed: bool) -> str:
    """The bench database of `kind`, seeded once and kept (bench/out/ for SQLite)."""
    marker = OUT / f"bench-{kind}.seeded"
    if marker.exists() and not reseed:
        return database_url(kind)
    url = database_urls(kind)
    seed(url, filler_locations=8 if kind == "postgresql" else 0)
    marker.touch()
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--databases", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"]
    )
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reseed", action="store_true", help="seed the databases again")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    wrk = ensure_tool("wrk")
    results = {
        kind: bench_database(kind, wrk, args.duration, args.rounds, args.reseed)
        for kind in args.databases
    }
    print(f"wrote {write_results(results, args.duration, args.rounds)}")


if __name__ == "__main__":
    main()
