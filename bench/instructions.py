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

Writes bench/INSTRUCTIONS.md. With `--parts` (`make bench-parts`) it says where the
instructions of the scenarios in PARTS go instead: each part counted only while one of its
functions runs (`Counted`), written to bench/PARTS.md. The data are bench/run.py's (1k and
100k businesses, 100k votes), seeded once into bench/out/ and reused (`--reseed` to start
again).
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
    # The stack's floor (bench/floor_app.py): the vote, /me and a list page with
    # the libraries this service must use and nothing of its own.
    "floor_vote": ("POST", "/locations/bench-100k/votes/submit/employer", VOTE),
    "floor_me": ("GET", "/me/", None),
    "floor_list": ("GET", "/locations/bench-1k/businesses/?perPage=20", None),
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
SIGNED_IN = {"me", "summary_100k", "floor_me"}
FLOORS = {"floor_vote", "floor_me", "floor_list"}
# Costly requests (a thousand rows; counting 100k votes): fewer requests suffice.
FEWER = {"export_1k": 3, "summary_100k": 3}

# Where a scenario's instructions go (`--parts`, bench/PARTS.md): named parts, each the
# functions (a file's path ending, ":", the function's qualified name) inside which its
# instructions are counted, whatever they call (`Counted`). Each part is a run of its own,
# so parts may nest. The first is the whole request, whose count the others are shares of.
WHOLE = (
    "the whole request, its body read (Caller.__call__)",
    ("bench/instructions.py:Caller.__call__",),
)
FLASK = (
    "Flask's part (Flask.wsgi_app, the body's streaming not in it)",
    ("flask/app.py:Flask.wsgi_app",),
)
HEADERS = (
    "the security and caching headers",
    (
        "directory_api/protection.py:add_security_headers",
        "directory_api/platform/caching.py:cache_headers",
    ),
)
LOG_LINE = ("the request's log line", ("directory_api/platform/logs.py:log_request",))
ANSWER = ("the answer written (endpoints.answer)", ("directory_api/endpoints.py:answer",))
CONTEXT = (
    "Flask's request context pushed and popped (the session opened; teardown)",
    ("flask/ctx.py:RequestContext.push", "flask/ctx.py:RequestContext.pop"),
)
ORM_CLOSE = (
    "the ORM session closed at teardown",
    ("flask_sqlalchemy/extension.py:SQLAlchemy._teardown_session",),
)
LIMITS = (
    "the rate limits checked and their headers",
    (
        "flask_limiter/_extension.py:Limiter._check_request_limit",
        "directory_api/platform/limits.py:headers_if_the_store_answers.<locals>.add_limit_headers",
    ),
)
PARTS = {
    "me": [
        WHOLE,
        FLASK,
        CONTEXT,
        (
            "the server-side session opened and saved",
            (
                "directory_api/platform/sessions.py:SessionLifetimeMixin.open_session",
                "directory_api/platform/sessions.py:SessionLifetimeMixin.save_session",
            ),
        ),
        ("Flask-Login finds the caller", ("flask_login/login_manager.py:LoginManager._load_user",)),
        (
            "of it, the user's statement and rows (access.load_user)",
            ("directory_api/access.py:load_user",),
        ),
        ANSWER,
        HEADERS,
        LOG_LINE,
        ORM_CLOSE,
    ],
    "vote": [
        WHOLE,
        (
            "the idempotency step and what it wraps (limits, body, view)",
            ("directory_api/platform/idempotency.py:idempotent.<locals>.wrapper",),
        ),
        (
            "the body read and validated (marshmallow)",
            ("directory_api/platform/bodies.py:load_body",),
        ),
        ("the location found", ("directory_api/access.py:get_location_or_404",)),
        LIMITS,
        (
            "the view (votes.submit_employer), its flush included",
            ("directory_api/api/votes.py:submit_employer",),
        ),
        (
            "of it, the employer and the address's history",
            ("directory_api/api/votes.py:employer_with_history",),
        ),
        ("of it, the screening", ("directory_api/vote_integrity.py:screen_submission",)),
        ("of it, the receipt queued", ("directory_api/vote_integrity.py:send_receipt",)),
        (
            "every ORM flush (the vote's; the idempotency step's)",
            ("sqlalchemy/orm/session.py:Session.flush",),
        ),
        (
            "of them, counts and revision (vote_integrity.keep_counts)",
            ("directory_api/vote_integrity.py:keep_counts",),
        ),
        ("the commit", ("sqlalchemy/orm/session.py:Session.commit",)),
        ANSWER,
        HEADERS,
        LOG_LINE,
        ORM_CLOSE,
    ],
    "list_1k_fresh": [
        WHOLE,
        FLASK,
        CONTEXT,
        (
            "the location with its counts",
            ("directory_api/api/listings.py:listings_blueprint.<locals>.locate_with_counts",),
        ),
        (
            "the remembered answer looked for",
            ("directory_api/platform/caching.py:answer_if_known",),
        ),
        ("the page (page_queries.paginate)", ("directory_api/platform/page_queries.py:paginate",)),
        (
            "statements run (SQLAlchemy's execute: compile-cache lookup, the driver, rows)",
            ("sqlalchemy/engine/base.py:Connection._execute_context",),
        ),
        ANSWER,
        HEADERS,
        LOG_LINE,
    ],
}
# A search's page is a list page's, found otherwise.
PARTS["search_100k_fresh"] = [
    *PARTS["list_1k_fresh"][:5],
    (
        "the term checked and its search built",
        ("directory_api/search.py:checked_term", "directory_api/search.py:search_of"),
    ),
    LIMITS,  # the broad-search allowance: tested before the work, its headers after
    *PARTS["list_1k_fresh"][5:],
]


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


def functions(specs: tuple[str, ...]) -> list:
    """The function objects `specs` name (a file's path ending, ":", the qualified name),
    closures and methods included: every function the process holds is looked at."""
    import gc
    import types

    wanted = {tuple(spec.rsplit(":", 1)) for spec in specs}
    found: dict[tuple[str, str], list] = {}
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            for suffix, qualname in wanted:
                if code.co_qualname == qualname and code.co_filename.endswith(suffix):
                    found.setdefault((suffix, qualname), []).append(obj)
    missing = wanted - found.keys()
    if missing:
        sys.exit(f"no such function: {sorted(missing)}")
    return [function for functions in found.values() for function in functions]


def nothing() -> None:
    """A counted function that does nothing: what counting adds to each call (`--parts`)."""


class Counted:
    """Functions made to have callgrind count only while one of them runs (outermost call
    to its return), whatever they call: each function's code is replaced by a trampoline
    that turns counting on, calls a copy of the function, and turns it off. Replacing the
    code, not the name, reaches every reference to the function (decorators, registered
    hooks, signal receivers). `undo` puts the code back."""

    CO_GENERATOR_LIKE = 0x20 | 0x80 | 0x200  # generator, coroutine, async generator

    def __init__(self, targets: list, toggle) -> None:
        import types

        self.saved = [(function, function.__code__) for function in targets]
        self.names = [f"_counted_{id(self)}_{number}" for number in range(len(targets))]
        depth = [0]

        def call(original, args, kwargs):
            depth[0] += 1
            if depth[0] == 1:
                toggle()
            try:
                return original(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    toggle()

        for (function, code), name in zip(self.saved, self.names, strict=True):
            if code.co_flags & self.CO_GENERATOR_LIKE:
                sys.exit(f"{code.co_qualname}: a generator's work runs after its call returns")
            original = types.FunctionType(
                code,
                function.__globals__,
                code.co_name,
                function.__defaults__,
                function.__closure__,
            )
            original.__kwdefaults__ = function.__kwdefaults__
            # The trampoline has the function's number of free variables (a code object
            # replaced must keep it), and finds its copy through a global of its own.
            function.__globals__[name] = lambda args, kwargs, o=original: call(o, args, kwargs)
            free = [f"v{index}" for index in range(len(code.co_freevars))]
            source = (
                "def outer():\n"
                + "".join(f"    {v} = None\n" for v in free)
                + "    def trampoline(*args, **kwargs):\n"
                # Named, never read (a variable not yet bound would raise): the
                # compiler keeps them as free variables all the same.
                + (f"        if 0:\n            ({', '.join(free)},)\n" if free else "")
                + f"        return {name}(args, kwargs)\n"
                + "    return trampoline\n"
            )
            scope: dict = {}
            exec(compile(source, f"<counted {code.co_qualname}>", "exec"), scope)  # noqa: S102
            function.__code__ = scope["outer"]().__code__

    def undo(self) -> None:
        for (function, code), name in zip(self.saved, self.names, strict=True):
            function.__code__ = code
            function.__globals__.pop(name, None)


def drive(requests: int, names: list[str], parts: bool = False) -> None:
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
    floor_cookie = ""
    if FLOORS & set(names):  # its table too
        from bench.floor_app import create_floor_app, create_table

        create_table(os.environ["DATABASE_URL"])
        call_floor = Caller(create_floor_app().wsgi_app)
        anchors.update(dict.fromkeys(FLOORS, call_floor))
        status, headers, _ = call_floor(
            call_floor.environ("POST", "/floor/sign-in", {"email": "bench@example.org"}, {})
        )
        assert status.startswith("200"), status
        floor_cookie = headers["Set-Cookie"].split(";")[0]

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
        extra = {"Cookie": floor_cookie if name in FLOORS else cookie} if name in SIGNED_IN else {}
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
        if parts:  # then its parts, each a run of its own
            for number, (_, specs) in enumerate(PARTS[name]):
                counted = Counted(functions(specs), marks.cg_toggle)
                for index in range(count):  # fresh pages: by paths no run used
                    unused = WARM_UP + count * (number + 1) + index
                    again = fresh_path(name, unused) if name in FRESH else path
                    status, _, _ = caller(caller.environ(method, again, body, extra))
                    assert status.startswith(expected), (name, status)
                counted.undo()
                marks.cg_dump(f"{name}|{number}:{count}".encode())
            counted = Counted([nothing], marks.cg_toggle)  # what the counting adds a call
            for _ in range(count):
                nothing()
            counted.undo()
            marks.cg_dump(f"{name}|nothing:{count}".encode())
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
    kind: str, url: str, requests: int, names: list[str], parts: bool = False
) -> tuple[dict[str, float], dict[str, float]]:
    """Instructions per request of each scenario, from one callgrind run, and of them those
    in the engine of `kind` where it runs in the process (IN_PROCESS_ENGINE). With `parts`,
    each scenario's parts too (PARTS), as "scenario|number"."""
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
        *(["--parts"] if parts else []),
    ]
    print(f"callgrind on {kind} ({len(names)} scenarios; minutes)…", flush=True)
    finished = subprocess.run(
        command, cwd=ROOT, env=limits_on(url, kind), capture_output=True, text=True
    )
    if finished.returncode != 0:
        sys.exit(f"the driver failed:\n{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}")
    counts, engine = {}, {}
    library = None if parts else IN_PROCESS_ENGINE.get(kind)  # parts show no engine share
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
        for scenario, floor in (
            ("vote", "floor_vote"),
            ("me", "floor_me"),
            ("list_1k_fresh", "floor_list"),
        ):
            if scenario in r and floor in r and "bare_flask" in r:
                lines += [
                    "",
                    f"{kind}: the stack's floor for `{scenario}` (bench/floor_app.py: its "
                    "libraries alone) is "
                    f"{r[floor] / r['bare_flask']:.1f} times bare Flask; the service's "
                    f"{scenario} costs {r[scenario] / r[floor]:.2f} times that floor, "
                    f"{(r[scenario] - r[floor]) / 1e6:.2f} M more.",
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


def write_parts(found: dict[str, dict[str, float]], names: list[str], requests: int) -> Path:
    """bench/PARTS.md: each scenario's parts on each database, M instructions a request and
    their share of the whole request counted the same way."""
    kinds = list(found)
    lines = [
        "# Where a request's instructions go",
        "",
        f"`python bench/instructions.py --parts` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: "
        f"callgrind, {requests} requests a part after {WARM_UP} warm-up requests, in-process, "
        "production settings with rate limits on (as bench/INSTRUCTIONS.md). Each part is "
        "counted in a run of its own, only while one of its functions runs, everything they "
        "call included (`Counted`: the function's code is swapped for a trampoline that "
        "turns counting on, calls the function and turns it off), so parts may nest (`of "
        "it`). The whole request counted so is shown beside its count the usual way; each "
        "part's share is of the former. What the counting adds to each counted call, "
        "measured on a function that does nothing, is in each table; it is not subtracted. "
        "A part at 0.00 does not run on that database (a first list page on PostgreSQL "
        "finds its location in its page's statement). A fresh page's URL grows by 20 "
        "zeros a part (no part may find a page another kept), and the vote's parts follow "
        "the earlier ones' votes from the same address: both add a little to later parts. "
        "M = millions of instructions a request; on PostgreSQL the client side only.",
        "",
    ]
    for name in names:
        heads = " | ".join(f"{kind} M | share" for kind in kinds)
        lines += [f"## {name}", "", f"| part | {heads} |", "|---|" + "---|---|" * len(kinds)]
        for label, key in (
            ("the whole request, counted the usual way", name),
            ("what counting adds to each counted call", f"{name}|nothing"),
        ):
            cells = " | ".join(f"{found[kind].get(key, 0) / 1e6:.3f} | " for kind in kinds)
            lines.append(f"| {label} | {cells} |")
        for number, (label, _) in enumerate(PARTS[name]):
            cells = []
            for kind in kinds:
                counts = found[kind]
                value, whole = counts.get(f"{name}|{number}"), counts.get(f"{name}|0")
                share = f"{100 * value / whole:.0f} %" if value is not None and whole else ""
                cells += [f"{value / 1e6:.2f}" if value is not None else "", share]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    path = ROOT / "bench" / "PARTS.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", nargs="+", default=["sqlite"])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--reseed", action="store_true")
    parser.add_argument(
        "--parts",
        action="store_true",
        help="where the instructions of the scenarios with PARTS go: writes bench/PARTS.md",
    )
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        drive(args.requests, args.scenarios, args.parts)
        return
    compile_marks()
    if args.parts:
        chosen = [name for name in args.scenarios if name in PARTS]
        if not chosen:
            sys.exit(f"--parts: none of these scenarios has parts; those that do: {list(PARTS)}")
        found = {
            kind: count(kind, database(kind, args.reseed), args.requests, chosen, parts=True)[0]
            for kind in args.databases
        }
        print(f"wrote {write_parts(found, chosen, args.requests)}")
        return
    results, engines = {}, {}
    for kind in args.databases:
        url = database(kind, args.reseed)
        results[kind], engines[kind] = count(kind, url, args.requests, args.scenarios)
        for name, value in results[kind].items():
            print(f"  {kind:10} {name:14} {value / 1e6:8.2f} M", flush=True)
    print(f"wrote {write(results, engines, args.requests)}")


if __name__ == "__main__":
    main()
