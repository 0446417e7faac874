"""Instructions per request, counted by callgrind: the repeatable figure on a noisy machine.

    python bench/instructions.py [--databases sqlite postgresql] [--requests 20]

`make bench-instructions` runs it. Each scenario is a request made in-process the way a
WSGI server makes it (one environ, the app called, its body read), to the service in
production settings with rate limits on, and to the separate minimal Flask app of
bench/bare_app.py, the ceiling. Under `valgrind --tool=callgrind`, counting is on only
around `--requests` requests of each scenario, after warm-up requests (a tiny C helper,
bench/cgmark.c, toggles collection and dumps the count under the scenario's name), so the
figure is the steady cost of one request: instructions of the Python interpreter, the
libraries and the database driver (SQLite in-process; for PostgreSQL only the client side).

Writes bench/INSTRUCTIONS.md. The data are bench/run.py's (1k and 100k businesses, 100k
votes), seeded once into bench/out/ and reused (`--reseed` to start again).
"""

import argparse
import ctypes
import io
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))
from bench.run import FRESH, VOTE, fresh_path  # after the path: it runs as a script

WARM_UP = 3
HISTORY = "## History"
# Scenario → (method, path, body). `me` and `summary` are signed in; `revalidate` sends
# the list page's ETag back (a 304).
SCENARIOS = {
    "bare_flask": ("GET", "/items/", None),
    # The write anchor (bench/bare_write_app.py): the vote's body stored as one row.
    "bare_write": ("POST", "/writes/", VOTE),
    "regions": ("GET", "/regions/", None),
    "list_1k": ("GET", "/locations/bench-1k/businesses/?perPage=20", None),
    "list_100k": ("GET", "/locations/bench-100k/businesses/?perPage=20", None),
    "deep_100k": ("GET", "/locations/bench-100k/businesses/?perPage=20&page=2000", None),
    "search_100k": ("GET", "/locations/bench-100k/businesses/search/golden%20bakery", None),
    # The same pages by URLs no request used before (bench/run.py's FRESH), so none is
    # answered from what the process kept (caching.py): the pages' work, where the
    # scenarios above are pages asked again.
    **{name: ("GET", None, None) for name in FRESH},
    "revalidate_1k": ("GET", "/locations/bench-1k/businesses/?perPage=20", None),
    "results_100k": ("GET", "/locations/bench-100k/votes/results", None),
    "me": ("GET", "/me/", None),
    "me_bearer": ("GET", "/me/", None),
    "summary_100k": ("GET", "/locations/bench-100k/votes/summary", None),
    "vote": ("POST", "/locations/bench-100k/votes/submit/employer", VOTE),
    # The same with a solved challenge (API.md 17): each request a solution of its own.
    "vote_solved": ("POST", "/locations/bench-100k/votes/submit/employer", VOTE),
    # The same with one webhook subscription listening (API.md 16): its event is written.
    "vote_hooked": ("POST", "/locations/bench-100k/votes/submit/employer", VOTE),
    "export_1k": ("GET", "/locations/bench-1k/businesses/export.csv", None),
}
SIGNED_IN = {"me", "summary_100k"}
# Costly requests (a thousand rows; counting 100k votes): fewer requests suffice.
FEWER = {"export_1k": 3, "summary_100k": 3}


# The driver: runs under valgrind --------------------------------------------------------------


class Caller:
    """Calls a WSGI app as a server would: a fresh environ per request, the body read."""

    def __init__(self, app) -> None:
        self.app = app

    def environ(self, method: str, path: str, body, headers: dict[str, str]) -> dict:
        from werkzeug.test import EnvironBuilder

        data = json.dumps(body).encode() if body is not None else None
        builder = EnvironBuilder(
            path=path,
            method=method,
            data=data,
            headers=headers,
            content_type="application/json" if data else None,
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
        )
        environ = builder.get_environ()
        environ["bench.body"] = data or b""
        return environ

    def __call__(self, environ: dict) -> tuple[str, dict[str, str], bytes]:
        request = dict(environ)
        request["wsgi.input"] = io.BytesIO(environ["bench.body"])
        answer: dict = {}

        def start_response(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, dict(headers)

        chunks = self.app(request, start_response)
        try:
            body = b"".join(chunks)
        finally:
            if hasattr(chunks, "close"):
                chunks.close()
        return answer["status"], answer["headers"], body


def drive(requests: int, names: list[str]) -> None:
    from bench.bare_app import app as bare
    from directory_api import create_app

    service = create_app()  # its request log (JSON lines) is part of the cost
    marks = ctypes.CDLL(str(OUT / "cgmark.so"))
    call_service, call_bare = Caller(service.wsgi_app), Caller(bare.wsgi_app)
    anchors = {"bare_flask": call_bare}
    if "bare_write" in names:  # it makes its table: only when asked for
        from bench.bare_write_app import app as bare_write
        from bench.bare_write_app import create_table

        create_table(os.environ["DATABASE_URL"])
        anchors["bare_write"] = Caller(bare_write.wsgi_app)

    status, headers, _ = call_service(
        call_service.environ(
            "POST",
            "/auth/login",
            {"email": "bench@example.org", "password": "bench passphrase"},
            {},
        )
    )
    assert status.startswith("200"), status
    cookie = headers["Set-Cookie"].split(";")[0]
    # A token for `me_bearer`; the earlier runs' are revoked first (50 live ones at most).
    call_service(call_service.environ("DELETE", "/me/tokens/", None, {"Cookie": cookie}))
    status, _, made = call_service(
        call_service.environ(
            "POST",
            "/me/tokens/",
            {"name": "bench", "password": "bench passphrase", "scopes": ["directory:read"]},
            {"Cookie": cookie},
        )
    )
    assert status.startswith("201"), status
    bearer = "Bearer " + json.loads(made)["token"]
    list_page = call_service.environ("GET", SCENARIOS["list_1k"][1], None, {})
    etag = call_service(list_page)[1]["ETag"]

    for name in names:
        method, path, body = SCENARIOS[name]
        caller = anchors.get(name, call_service)
        extra = {"Cookie": cookie} if name in SIGNED_IN else {}
        if name == "me_bearer":  # the same request by a script: its token, no cookie
            extra = {"Authorization": bearer}
        if name == "revalidate_1k":
            extra["If-None-Match"] = etag
        count = FEWER.get(name, requests)
        # Built before counting starts: one per request (the same one unless fresh; a vote
        # with a solved challenge has a solution of its own, found here).
        environs = [
            caller.environ(
                method,
                fresh_path(name, number) if name in FRESH else path,
                {**body, "altcha": solved(service)} if name == "vote_solved" else body,
                extra,
            )
            for number in range(WARM_UP + count)
        ]
        expected = "304" if name == "revalidate_1k" else ("201", "202", "200")
        hook = subscribe(call_service, cookie) if name == "vote_hooked" else None
        for environ in environs[:WARM_UP]:
            status, _, _ = caller(environ)
            assert status.startswith(expected), (name, status)
        marks.cg_start()
        for environ in environs[WARM_UP:]:
            caller(environ)
        marks.cg_stop_and_dump(f"{name}:{count}".encode())
        if hook is not None:  # and its deliveries with it: other scenarios have none
            call_service(call_service.environ("DELETE", hook, None, {"Cookie": cookie}))


def subscribe(call_service: Caller, cookie: str) -> str:
    """A subscription of bench-100k to submitted votes (its receiver is never called
    here); the path to delete it by."""
    status, _, made = call_service(
        call_service.environ(
            "POST",
            "/locations/bench-100k/webhooks/",
            {"url": "https://93.184.216.34/hooks", "events": ["vote.submitted"]},
            {"Cookie": cookie},
        )
    )
    assert status.startswith("201"), (status, made)
    return f"/locations/bench-100k/webhooks/id/{json.loads(made)['id']}"


def solved(app) -> str:
    """A solution of a fresh challenge for bench-100k, as the widget sends it."""
    import base64
    import hashlib

    from directory_api.platform.proof_of_work import create_challenge
    from directory_api.vote_integrity import challenge_key

    with app.app_context():
        challenge = create_challenge(challenge_key(), {"location": "bench-100k"}, 1_000)
    number = next(
        n
        for n in range(1_001)
        if hashlib.sha256(f"{challenge['salt']}{n}".encode()).hexdigest() == challenge["challenge"]
    )
    fields = {name: challenge[name] for name in ("algorithm", "challenge", "salt", "signature")}
    return base64.b64encode(json.dumps({**fields, "number": number}).encode()).decode()


# The runner ------------------------------------------------------------------------------------


def compile_marks() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            str(OUT / "cgmark.so"),
            str(ROOT / "bench" / "cgmark.c"),
        ],
        check=True,
    )


def database(kind: str, reseed: bool) -> str:
    """The bench data of bench/run.py, seeded once and kept in bench/out/."""
    from bench.run import database_url, database_urls, seed

    marker = OUT / f"instructions-{kind}.seeded"
    if marker.exists() and not reseed:
        return database_url(kind, "instructions")
    print(f"seeding {kind} (once; kept in bench/out/)…", flush=True)
    url = database_urls(kind, "instructions")
    seed(url, filler_locations=0)
    marker.touch()
    return url


# The database engine that runs inside the process, whose instructions a scenario's count
# includes: the work of its statements (PostgreSQL's is the server's, not counted).
IN_PROCESS_ENGINE = {"sqlite": "libsqlite3"}


def in_engine(dump: Path, library: str) -> int:
    """The instructions of `dump` spent in `library`'s own functions (exclusive costs)."""
    from bench.run import ensure_tool

    annotate = Path(ensure_tool("valgrind")).with_name("callgrind_annotate")
    listing = subprocess.run(
        [str(annotate), "--inclusive=no", "--auto=no", "--threshold=100", str(dump)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    costs = re.findall(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+\S.*\[(.*)\]$", listing, re.M)
    return sum(int(cost.replace(",", "")) for cost, lib in costs if library in lib)


def count(
    kind: str, url: str, requests: int, names: list[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Instructions per request of each scenario, from one callgrind run, and of them those
    in the engine of `kind` where it runs in the process (IN_PROCESS_ENGINE)."""
    from bench.run import ensure_tool, limits_on

    runs = OUT / f"callgrind-{kind}"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir(parents=True)
    command = [
        ensure_tool("valgrind"),
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--callgrind-out-file={runs}/callgrind.out.%p",
        sys.executable,
        str(Path(__file__).resolve()),
        "--driver",
        "--requests",
        str(requests),
        "--scenarios",
        *names,
    ]
    print(f"callgrind on {kind} ({len(names)} scenarios; minutes)…", flush=True)
    finished = subprocess.run(
        command, cwd=ROOT, env=limits_on(url, kind), capture_output=True, text=True
    )
    if finished.returncode != 0:
        sys.exit(f"the driver failed:\n{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}")
    counts, engine = {}, {}
    library = IN_PROCESS_ENGINE.get(kind)
    for dump in runs.glob("callgrind.out.*"):
        text = dump.read_text(errors="replace")
        named = re.search(r"^desc: Trigger: Client Request: (\S+):(\d+)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if named and total:
            counts[named.group(1)] = int(total.group(1)) / int(named.group(2))
            if library is not None:
                engine[named.group(1)] = in_engine(dump, library) / int(named.group(2))
    return counts, engine


def write(
    results: dict[str, dict[str, float]], engines: dict[str, dict[str, float]], requests: int
) -> Path:
    lines = [
        "# Instructions per request",
        "",
        f"`make bench-instructions` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: callgrind, "
        f"{requests} requests per scenario after {WARM_UP} warm-up requests, in-process "
        "(a WSGI call per request), production settings with rate limits on. "
        "`bare_flask` is the separate minimal Flask app of bench/bare_app.py; `bare_write` "
        "the one of bench/bare_write_app.py, which stores each request's body as one row. "
        "M = millions of instructions. On PostgreSQL only the client side is counted "
        "(the driver, not the server's work: see its deep page and search). On SQLite, "
        "`in SQLite` is the part spent in SQLite's own functions (the statements' work, "
        "callgrind's exclusive costs in libsqlite3; the allocations it asks of libc are "
        "not in it), and `rest ÷ bare` the rest of the request against bare Flask.",
        "",
    ]
    kinds = list(results)
    heads = [
        f"{k} M | ÷ bare" + (" | in SQLite M | rest ÷ bare" if engines.get(k) else "")
        for k in kinds
    ]
    lines.append("| scenario | " + " | ".join(heads) + " |")
    lines.append("|---|" + "".join("---|" * (4 if engines.get(k) else 2) for k in kinds))
    for name in SCENARIOS:
        cells = []
        for kind in kinds:
            value = results[kind].get(name)
            bare = results[kind].get("bare_flask")
            engine = engines.get(kind)
            if value is None:
                cells += ["", ""] + (["", ""] if engine else [])
                continue
            cells += [f"{value / 1e6:.2f}", f"{value / bare:.1f}" if bare else ""]
            if engine:
                spent = engine.get(name, 0.0)
                rest = f"{(value - spent) / bare:.1f}" if bare else ""
                cells += [f"{spent / 1e6:.2f}", rest]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for kind in kinds:
        r = results[kind]
        if "revalidate_1k" in r and "list_1k_fresh" in r:
            lines += [
                "",
                f"{kind}: a 304 revalidation costs {r['revalidate_1k'] / r['list_1k_fresh']:.2f} "
                "of the list page's work (target < 0.25).",
            ]
        if "vote" in r and "bare_write" in r:
            lines += [
                "",
                f"{kind}: a vote costs {r['vote'] / r['bare_write']:.1f} times the write anchor "
                "(bench/bare_write_app.py: the same body stored as one row, one commit).",
            ]
    path = ROOT / "bench" / "INSTRUCTIONS.md"
    # The history below the table is kept: what each change measured.
    kept = path.read_text().partition(HISTORY)[2] if path.exists() else ""
    path.write_text("\n".join(lines) + "\n" + (f"\n{HISTORY}{kept}" if kept else ""))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", nargs="+", default=["sqlite"])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--reseed", action="store_true")
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        drive(args.requests, args.scenarios)
        return
    compile_marks()
    results, engines = {}, {}
    for kind in args.databases:
        url = database(kind, args.reseed)
        results[kind], engines[kind] = count(kind, url, args.requests, args.scenarios)
        for name, value in results[kind].items():
            print(f"  {kind:10} {name:14} {value / 1e6:8.2f} M", flush=True)
    print(f"wrote {write(results, engines, args.requests)}")


if __name__ == "__main__":
    main()
