"""The CSV import at its largest (10,000 rows, csv_import.MAX_ROWS): wall time and peak memory.

    python bench/imports.py [--url sqlite:////tmp/imports.sqlite3] [--rows 10000]

In one process, the way a WSGI server calls the app (development settings, a database of
its own: a fresh SQLite file unless `--url` names another, migrated), a signed-in super
imports into a new location, in this order:

1. a dry run of `--rows` new businesses (every row checked, nothing kept);
2. the same rows for real (`created`);
3. the export of those rows imported back unchanged (`unchanged`, no write);
4. that export with one row in a hundred edited (`updated`).

Every step runs at two locations with the same rows: timed at one, under `tracemalloc` at
the other (its peak: the most memory the import held at once; tracing slows it, so its
time is not the one reported). Writes bench/IMPORTS.md.
Wall times depend on the machine and its load: compare within one run.
"""

import argparse
import csv
import io
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EMAIL, PASSWORD = "imports@example.org", "imports bench passphrase"
TIMED, TRACED = "imports", "imports-traced"


def path(location: str) -> str:
    return f"/locations/{location}/businesses/"


def rows_csv(rows: int) -> bytes:
    """`rows` new businesses, every importable column filled (socials left out)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["name", "branch", "description", "email", "phone", "address", "website"])
    for number in range(rows):
        writer.writerow(
            [
                f"Business {number:05}",
                f"Branch {number % 7}",
                f"A description of business {number}, with a comma and some length to it.",
                f"contact{number}@example.org",
                f"+44 20 7946 {number % 10000:04}",
                f"{number} High Street, Harbour Town",
                f"https://business{number}.example.org",
            ]
        )
    return out.getvalue().encode()


def edited(export: bytes, every: int = 100) -> bytes:
    """The export with the description of one row in `every` changed."""
    rows = list(csv.reader(io.StringIO(export.decode())))
    column = rows[0].index("description")
    for row in rows[1::every]:
        row[column] += " Edited."
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode()


def post(client, location: str, body: bytes, query: str) -> dict:
    response = client.post(
        path(location) + "import" + query, data=body, headers={"Content-Type": "text/csv"}
    )
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return response.get_json()


def peak_of(client, body: bytes, query: str) -> float:
    tracemalloc.start()
    try:
        post(client, TRACED, body, query)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()

    from flask_migrate import upgrade

    from directory_api import create_app

    folder = Path(tempfile.mkdtemp(prefix="imports-"))
    url = args.url or f"sqlite:///{folder / 'imports.sqlite3'}"
    app = create_app("development", SQLALCHEMY_DATABASE_URI=url, SESSION_FILE_DIR=str(folder))
    app.logger.disabled = True
    with app.app_context():
        upgrade()
    made = app.test_cli_runner().invoke(args=["create-super", EMAIL, "--password", PASSWORD])
    assert made.exit_code == 0, made.output
    client = app.test_client()
    assert (
        client.post("/auth/login", json={"email": EMAIL, "password": PASSWORD}).status_code == 200
    )
    for slug in (TIMED, TRACED):
        created = client.post("/locations/", json={"name": slug, "slug": slug})
        assert created.status_code == 201, created.get_json()

    new = rows_csv(args.rows)
    results = []

    def run(label: str, body: bytes, query: str = "", traced: bytes | None = None) -> None:
        peak = peak_of(client, traced if traced is not None else body, query)
        started = time.perf_counter()
        answer = post(client, TIMED, body, query)
        seconds = time.perf_counter() - started
        results.append((label, seconds, peak, answer))
        print(f"  {label:<40} {seconds:6.2f} s  {peak:6.1f} MiB  {answer}")

    def exported(location: str) -> bytes:
        return client.get(path(location) + "export.csv").get_data()

    run(f"dry run, {args.rows} new rows", new, "?dryRun=true")
    run(f"{args.rows} new rows", new)
    run(f"the export back, {args.rows} unchanged", exported(TIMED), traced=exported(TRACED))
    run(
        "the export, 1 row in 100 edited",
        edited(exported(TIMED)),
        traced=edited(exported(TRACED)),
    )

    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    kind = url.split(":", 1)[0]
    lines = [
        "# CSV import at its largest",
        "",
        f"`python bench/imports.py` on {stamp}, {kind}: {args.rows} rows "
        f"({len(new) / 2**20:.1f} MiB of CSV), in-process, development settings. The peak is "
        "tracemalloc's during the same import at a second location with the same rows, so it "
        "is the import's memory, not the process's.",
        "",
        "| import | wall time | peak memory | answer |",
        "|---|---|---|---|",
        *(
            f"| {label} | {seconds:.2f} s | {peak:.1f} MiB | `{answer}` |"
            for label, seconds, peak, answer in results
        ),
        "",
    ]
    (ROOT / "bench" / "IMPORTS.md").write_text("\n".join(lines))
    print("wrote bench/IMPORTS.md")


if __name__ == "__main__":
    main()
