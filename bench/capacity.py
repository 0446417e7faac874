"""Capacity: what one instance serves, and what adding instances does, on PostgreSQL + Redis.

    python bench/capacity.py [--instances 1 2 3] [--duration 10] [--rounds 3]

Seeds (once, kept) a database of bench/run.py's data without the filler locations, then for
1, 2 and 3 instances of the service (gunicorn with its own settings, 2 gthread workers
each, production settings, rate limits on with the allowances raised so the load is
measured, not the 429), loads each scenario on every instance at once with one wrk each
(1 thread, 4 connections) and sums their requests per second. Meanwhile it reads, from
/proc, the CPU time of PostgreSQL's processes, of Redis and of the instances, and the
connections PostgreSQL holds for the database. Before the runs it counts, in-process, the
round trips one request of each scenario makes to PostgreSQL (statements, BEGIN and
COMMIT) and to Redis (commands or pipelines sent).

Writes docs/CAPACITY.md's measured table (the rest of that file is prose around it).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import proc
from bench.run import (
    OUT,
    PASSWORD,
    VOTE,
    database_servers,
    database_url,
    database_urls,
    ensure_tool,
    free_port,
    fresh,
    limits_on,
    run_wrk,
    sign_in,
    start_gunicorn,
)

DATABASE = "capacity"
BEGIN_MARK, END_MARK = "<!-- measured: begin -->", "<!-- measured: end -->"


def seeded(reseed: bool) -> str:
    marker = OUT / f"{DATABASE}-postgresql.seeded"
    if marker.exists() and not reseed:
        return database_url("postgresql", DATABASE)
    url = database_urls("postgresql", DATABASE)
    # In a process of its own: seeding imports config.py in development settings, and
    # config.py reads the environment once, when first imported (round_trips sets the
    # production one first, in this process).
    subprocess.run(
        [sys.executable, "-c", f"from bench.run import seed; seed({url!r}, filler_locations=0)"],
        cwd=ROOT,
        check=True,
    )
    marker.touch()
    return url


def environment(url: str) -> dict[str, str]:
    return limits_on(url, "postgresql") | {
        "RATELIMIT_LOGIN_PER_IP": "100000000/minute",
        "RATELIMIT_LOGIN_PER_EMAIL": "100000000/minute",
        "LOG_LEVEL": "WARNING",  # one JSON line per request is still written (the request log)
    }


def scripts() -> dict[str, Path]:
    OUT.mkdir(exist_ok=True)
    sign_in_body = json.dumps({"email": "bench@example.org", "password": PASSWORD})
    made = {"sign_in": OUT / "capacity-sign-in.lua"}
    made["sign_in"].write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {json.dumps(sign_in_body)}\n"
    )
    return made


def vote_script(tag: str) -> Path:
    """A wrk script sending each vote from an address of its own (`tag` and a count), as
    the public's are: one address voting thousands of times would measure the growth of
    its own history (the duplicate and receipt checks read an address's earlier votes),
    which the rate limits never allow."""
    before, after = json.dumps({**VOTE, "yourEmail": "@"}).split('"@"')
    script = OUT / f"capacity-vote-{tag}.lua"
    script.write_text(
        "local sent = 0\n"
        "request = function()\n"
        "  sent = sent + 1\n"
        f"  local body = {json.dumps(before)} .. string.format('\"voter-{tag}-%d@example.org\"',"
        f" sent) .. {json.dumps(after)}\n"
        '  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)\n'
        "end\n"
    )
    return script


def cases(base: str, lua: dict[str, Path]) -> dict[str, tuple[str, dict]]:
    """Scenario → (URL, wrk options) on the instance at `base`."""
    return {
        "list page (fresh)": fresh("list_1k_fresh", base),
        "vote": (
            f"{base}/locations/bench-100k/votes/submit/employer",
            {"script": vote_script(f"{base.rsplit(':', 1)[1]}-{time.time_ns()}")},
        ),
        "sign-in": (f"{base}/auth/login", {"script": lua["sign_in"]}),
    }


# Round trips of one request, counted in-process ------------------------------------------


def round_trips(url: str) -> dict[str, tuple[int, int]]:
    """Scenario → (PostgreSQL round trips, Redis round trips) of one request, the app in
    production settings as gunicorn runs it, after a warm-up request. PostgreSQL's are
    counted on the wire (tests/faults.py: the ReadyForQuery messages through a proxy, so a
    BEGIN or COMMIT counts as surely as a statement); Redis' are the commands or pipelines
    the client sends."""
    # config.py reads the environment once, when first imported: set it first.
    os.environ.update(environment(url))
    import redis
    from sqlalchemy import make_url

    from directory_api import create_app
    from tests.faults import RoundTrips, tcp_proxy

    counter = RoundTrips()
    target = make_url(url)
    with tcp_proxy(target.host or "127.0.0.1", target.port or 5432, counter.watcher) as proxy:
        proxied = target.set(host="127.0.0.1", port=proxy.port, query={"sslmode": "disable"})
        app = create_app("production", SQLALCHEMY_DATABASE_URI=proxied.render_as_string(False))
        sent_to_redis = [0]
        original = redis.connection.AbstractConnection.send_packed_command

        def sent(self, command, check_health=True):
            sent_to_redis[0] += 1
            return original(self, command, check_health)

        client = app.test_client()
        requests = {
            # A page not asked before (its page number spelt with leading zeros, as
            # bench/run.py's fresh scenarios do): its work, not what the process kept.
            "list page (fresh)": lambda n: client.get(
                f"/locations/bench-1k/businesses/?perPage=20&page={'0' * n}1"
            ),
            "vote": lambda _n: client.post(
                "/locations/bench-100k/votes/submit/employer", json=VOTE
            ),
            "sign-in": lambda _n: client.post(
                "/auth/login", json={"email": "bench@example.org", "password": PASSWORD}
            ),
        }
        found = {}
        redis.connection.AbstractConnection.send_packed_command = sent
        try:
            for name, ask in requests.items():
                ask(0)
                counter.count, sent_to_redis[0] = 0, 0
                response = ask(1)
                assert response.status_code < 400, (name, response.status_code)
                found[name] = (counter.count, sent_to_redis[0])
        finally:
            redis.connection.AbstractConnection.send_packed_command = original
            with app.app_context():
                from directory_api.platform.extensions import db

                db.engine.dispose()
    return found


# Load ---------------------------------------------------------------------------------------


def connections(url: str) -> int:
    name = url.rsplit("/", 1)[1]
    query = f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'"  # noqa: S608
    admin = url.rsplit("/", 1)[0] + "/postgres"
    return int(
        subprocess.run(
            ["psql", admin, "-qtAc", query], capture_output=True, text=True, check=True
        ).stdout.strip()
    )


def load(
    wrk: str,
    targets: list[tuple[str, dict]],
    duration: int,
    url: str,
    watched: dict[str, tuple[int, ...]],
) -> dict:
    """Every target loaded at once by a wrk of its own: summed req/s, worst p50, and the
    CPU shares of the process trees `watched` names (the PostgreSQL server, Redis, the
    instances' gunicorn masters with their workers)."""
    from concurrent.futures import ThreadPoolExecutor

    def seconds() -> dict[str, float]:
        return {name: sum(map(proc.tree_seconds, pids)) for name, pids in watched.items()}

    before = seconds()
    started = time.monotonic()
    with ThreadPoolExecutor(len(targets) + 1) as pool:
        runs = [
            pool.submit(run_wrk, wrk, target, duration, **options) for target, options in targets
        ]
        time.sleep(duration / 2)
        held = connections(url)
        results = [run.result() for run in runs]
    elapsed = time.monotonic() - started
    used = {name: (spent - before[name]) / elapsed for name, spent in seconds().items()}
    return {
        "rps": sum(result["rps"] for result in results),
        "p50": max(result["p50"] for result in results),
        "connections": held,
        **{f"cpu_{name}": share for name, share in used.items()},
    }


def measure(url: str, wrk: str, instances: list[int], duration: int, rounds: int) -> dict:
    """Scenario → instances → the round with the median req/s (rounds interleaved: every
    instance count once per round, so a noisy minute of the machine hits them alike)."""
    runs: dict[str, dict[int, list[dict]]] = {}
    for _ in range(rounds):
        for name, by_count in measure_once(url, wrk, instances, duration).items():
            for count, result in by_count.items():
                runs.setdefault(name, {}).setdefault(count, []).append(result)
    return {
        name: {
            count: sorted(results, key=lambda result: result["rps"])[len(results) // 2]
            for count, results in by_count.items()
        }
        for name, by_count in runs.items()
    }


def measure_once(url: str, wrk: str, instances: list[int], duration: int) -> dict:
    lua = scripts()
    env = environment(url)
    results: dict[str, dict[int, dict]] = {}
    postgres, redis = database_servers(url)
    for count in instances:
        with ExitStack() as stack:
            ports, masters = [], []
            for number in range(count):
                port = free_port()
                process = start_gunicorn("wsgi:app", env, port, f"capacity-{count}-{number}.log")
                stack.callback(process.wait)
                stack.callback(process.terminate)
                ports.append(port)
                masters.append(process.pid)
            watched = {"postgres": (postgres,), "redis": (redis,), "app": tuple(masters)}
            sign_in(ports[0])  # the account exists and answers
            bases = [f"http://127.0.0.1:{port}" for port in ports]
            for name in cases(bases[0], lua):
                targets = [cases(base, lua)[name] for base in bases]
                load(wrk, targets, 2, url, watched)  # warm up every worker
                result = load(wrk, targets, duration, url, watched)
                results.setdefault(name, {})[count] = result
                print(f"{count} instance(s), {name}: {result}", flush=True)
    return results


def table(
    results: dict, trips: dict, instances: list[int], duration: int, rounds: int
) -> list[str]:
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d} by `python bench/capacity.py` ({duration} s"
        f" runs, the median of {rounds} interleaved rounds; wrk, 1 thread and 4 connections"
        " per instance; this machine: 2 cores, shared by PostgreSQL, Redis, the instances"
        " and wrk).",
        "",
        "| scenario | round trips: PostgreSQL / Redis | "
        + " | ".join(f"{n} instance{'s' if n > 1 else ''}: req/s (p50 ms)" for n in instances)
        + " | PostgreSQL connections | CPU, 1 instance: app / PostgreSQL / Redis, cores"
        " | CPU per request, 1 instance: app / PostgreSQL, ms |",
        "|---|---|" + "---:|" * len(instances) + "---:|---|---|",
    ]
    for name, by_count in results.items():
        one = by_count[min(instances)]
        cells = [f"{by_count[n]['rps']:.0f} ({by_count[n]['p50']:.0f})" for n in instances]
        held = " / ".join(str(by_count[n]["connections"]) for n in instances)
        cpu = " / ".join(f"{one[f'cpu_{k}']:.2f}" for k in ("app", "postgres", "redis"))
        each = " / ".join(f"{one[f'cpu_{k}'] / one['rps'] * 1000:.1f}" for k in ("app", "postgres"))
        pg, rd = trips[name]
        lines.append(
            f"| {name} | {pg} / {rd} | " + " | ".join(cells) + f" | {held} | {cpu} | {each} |"
        )
    lines += [
        "",
        "CPU is read from /proc over each run (1.00: one core busy the whole run; the"
        " instances' gunicorn masters with their workers, the PostgreSQL server with its"
        " backends, those that ended included, and Redis: bench/proc.py); PostgreSQL"
        " connections are those open on the database halfway through each run, for"
        f" {', '.join(map(str, instances))} instances.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reseed", action="store_true")
    options = parser.parse_args()
    wrk = ensure_tool("wrk")
    url = seeded(options.reseed)
    trips = round_trips(url)
    print("round trips:", trips, flush=True)
    results = measure(url, wrk, options.instances, options.duration, options.rounds)
    out = ROOT / "docs" / "CAPACITY.md"
    text = out.read_text() if out.exists() else f"{BEGIN_MARK}\n{END_MARK}\n"
    head, rest = text.split(BEGIN_MARK, 1)
    tail = rest.split(END_MARK, 1)[1]
    measured = "\n".join(table(results, trips, options.instances, options.duration, options.rounds))
    out.write_text(f"{head}{BEGIN_MARK}\n{measured}\n{END_MARK}{tail}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
