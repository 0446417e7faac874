"""A real browser (headless Chromium) uses the API as the admin frontend on another origin.

The API runs over HTTP on one loopback port; tests/browser/frontend.html is served from a
second port that is listed in CORS_ORIGINS and from a third that is not. 127.0.0.1 on two
ports is cross-origin but same-site, so the SameSite=Lax session cookie goes along. The page
calls fetch(..., {credentials: "include"}) and writes what it could read into its DOM, which
`chromium --dump-dom` hands back; a screenshot is saved for CI (BROWSER_ARTIFACTS_DIR).

Without Chromium these tests skip, unless CI or REQUIRE_BROWSER=1 is set: then they fail.
"""

import html
import http.client
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode

import pytest
from flask import Flask
from sqlalchemy import select
from werkzeug.serving import WSGIRequestHandler, make_server

from directory_api.models import Region
from directory_api.platform.extensions import db

from .factories import PASSWORD, make_location, make_region, make_user

PAGE_DIR = Path(__file__).resolve().parent / "browser"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER_TIMEOUT = 20  # seconds for one Chromium run, page loads and fetches included
SUPER_EMAIL = "super@example.com"
REFUSED = "Cross-site request refused: this origin is not allowed."


def truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@pytest.fixture(scope="module")
def chromium() -> str:
    wanted = os.environ.get("CHROMIUM")
    names = [wanted] if wanted else CHROMIUM_NAMES
    found = next(filter(None, map(shutil.which, names)), None)
    if found:
        return found
    reason = (
        f"Chromium not found ({', '.join(names)}): apt-get install -y chromium, "
        "or set CHROMIUM=/path/to/it"
    )
    if truthy("CI") or truthy("REQUIRE_BROWSER"):
        pytest.fail(f"{reason}. CI / REQUIRE_BROWSER=1 requires the browser tests.")
    pytest.skip(reason)


class PageHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


class QuietWSGIRequestHandler(WSGIRequestHandler):
    def log_request(self, *args, **kwargs):
        pass  # the app logs its own requests


class Server:
    """A server on a free loopback port, serving from a thread until stop()."""

    def __init__(self, server) -> None:
        self.server = server
        self.port = server.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def page_server() -> Server:
    handler = partial(PageHandler, directory=str(PAGE_DIR))
    return Server(ThreadingHTTPServer(("127.0.0.1", 0), handler))


class Recorder:
    """WSGI middleware keeping what reached the API and what it answered."""

    def __init__(self, wsgi_app) -> None:
        self.wsgi_app = wsgi_app
        self.seen: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        entry = {
            "method": environ["REQUEST_METHOD"],
            "path": environ.get("PATH_INFO", ""),
            "origin": environ.get("HTTP_ORIGIN"),
            "cookie": environ.get("HTTP_COOKIE"),
        }

        def recording_start_response(status, headers, exc_info=None):
            entry["status"] = int(status.split()[0])
            entry["headers"] = {name.lower(): value for name, value in headers}
            return start_response(status, headers, exc_info)

        with self.lock:
            self.seen.append(entry)
        return self.wsgi_app(environ, recording_start_response)

    def from_origin(self, origin: str) -> list[dict]:
        with self.lock:
            return [entry for entry in self.seen if entry["origin"] == origin]


@dataclass
class Stack:
    app: Flask
    api: Server
    page: Server  # its origin is in CORS_ORIGINS
    foreign: Server  # its origin is not
    recorder: Recorder
    region_id: uuid.UUID
    artifacts: Path


@pytest.fixture
def stack(app_factory, chromium, tmp_path) -> Iterator[Stack]:
    servers = [page_server(), page_server()]
    page, foreign = servers
    try:
        app = app_factory(
            CORS_ORIGINS=[page.origin],
            # The testing config's cookie, pinned against SESSION_COOKIE_* in the environment:
            # not Secure, as over plain http (Chromium would still keep a Secure one, since
            # it trusts loopback). The page origins are same-site with the API (ports do
            # not count), so Lax is enough.
            SESSION_COOKIE_SECURE=False,
            SESSION_COOKIE_SAMESITE="Lax",
        )
        recorder = Recorder(app.wsgi_app)
        app.wsgi_app = recorder  # type: ignore[method-assign]
        with app.app_context():
            make_user(SUPER_EMAIL, is_super=True)
            region_id = make_region("north", name="North").id
            make_location("harbour", email="votes@harbour.example")
        server = make_server(
            "127.0.0.1", 0, app, threaded=True, request_handler=QuietWSGIRequestHandler
        )
        servers.append(api := Server(server))
        artifacts = Path(os.environ.get("BROWSER_ARTIFACTS_DIR") or tmp_path)
        artifacts.mkdir(parents=True, exist_ok=True)
        yield Stack(app, api, page, foreign, recorder, region_id, artifacts)
    finally:
        for running in servers:
            running.stop()


def page_url(origin: str, stack: Stack, steps: str, **extra: str) -> str:
    query = {
        "api": stack.api.origin,
        "email": SUPER_EMAIL,
        "password": PASSWORD,
        "region": "north",
        "name": "North Coast",
        "steps": steps,
        "location": "harbour",
        **extra,
    }
    return f"{origin}/frontend.html?{urlencode(query)}"


def run_browser(chromium: str, url: str, screenshot: Path, profile: Path, capsys) -> dict:
    """Load `url` in headless Chromium; answer the page's report and save a screenshot."""
    dom = rendered_dom(chromium, url, screenshot, profile, capsys)
    match = re.search(r'<pre id="results"[^>]*>(.*?)</pre>', dom, re.DOTALL)
    assert match and match.group(1), f"no report from the page:\n{dom[-3000:]}"
    report = json.loads(html.unescape(match.group(1)))
    assert "crashed" not in report, report
    return report


def rendered_dom(
    chromium: str,
    url: str,
    screenshot: Path,
    profile: Path,
    capsys,
    # Virtual time stands still while anything loads: every fetch finishes first.
    wait: str = "--virtual-time-budget=10000",
) -> str:
    """Load `url` in headless Chromium, let everything load, and answer the DOM it made."""
    command = [
        chromium,
        "--headless=new",
        "--no-sandbox",  # CI runners and containers often run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1100,800",
        wait,
        f"--screenshot={screenshot}",
        "--dump-dom",
        url,
    ]
    started = time.monotonic()
    finished = subprocess.run(  # noqa: S603
        command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT, check=False
    )
    with capsys.disabled():
        print(f"\nbrowser: {time.monotonic() - started:.1f} s, screenshot {screenshot}")
    assert finished.returncode == 0, (
        f"Chromium exited {finished.returncode}:\n{finished.stderr[-3000:]}"
    )
    return finished.stdout


def region_row(stack: Stack) -> tuple[str, str]:
    """(slug, name) of the region as the database has it now."""
    with stack.app.app_context():
        region = db.session.get(Region, stack.region_id)
        return region.slug, region.name


def api_request(stack: Stack, method: str, path: str, body=None, **headers: str):
    """A request from outside any browser: no preflight, headers exactly as given."""
    if body is not None:
        headers["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection("127.0.0.1", stack.api.port, timeout=10)
    try:
        connection.request(method, path, json.dumps(body) if body else None, headers)
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        connection.close()


def test_listed_origin_signs_in_edits_a_region_and_signs_out(stack, chromium, tmp_path, capsys):
    url = page_url(stack.page.origin, stack, "login,me,edit,logout,me")
    screenshot = stack.artifacts / "browser-listed-origin.png"
    report = run_browser(chromium, url, screenshot, tmp_path / "profile", capsys)

    assert report["origin"] == stack.page.origin
    steps = report["results"]
    assert [step["step"] for step in steps] == ["login", "me", "edit", "logout", "me"]
    for step in steps:
        assert "error" not in step, step  # every answer was readable through CORS
        assert step["type"] == "cors", step
        assert step["requestId"], step  # an exposed header
    login, me, edit, logout, me_after = steps

    assert login["status"] == 200, login
    assert (login["body"]["email"], login["body"]["isSuper"]) == (SUPER_EMAIL, True)
    assert int(login["rateLimit"]) > 0
    assert me["status"] == 200, me
    assert (me["body"]["id"], me["body"]["email"]) == (login["body"]["id"], SUPER_EMAIL)
    assert edit["status"] == 200, edit
    assert edit["body"]["id"] == str(stack.region_id)
    assert (edit["body"]["slug"], edit["body"]["name"]) == ("north", "North Coast")
    assert edit["requestId"] == "browser-edit"  # an allowed request header, echoed
    assert logout["status"] == 204, logout
    assert me_after["status"] == 401, me_after
    assert me_after["body"]["status"] == 401  # problem details are readable too
    # The session cookie is HttpOnly: the page's script never sees it.
    assert "session" not in report["cookies"]

    assert region_row(stack) == ("north", "North Coast")

    # Every request carried the page's Origin; every answer allowed it, with credentials.
    seen = stack.recorder.from_origin(stack.page.origin)
    assert [(e["method"], e["path"], e["status"]) for e in seen if e["method"] != "OPTIONS"] == [
        ("POST", "/auth/login", 200),
        ("GET", "/me/", 200),
        ("PUT", "/regions/slug/north", 200),
        ("POST", "/auth/logout", 204),
        ("GET", "/me/", 401),
    ]
    for entry in seen:
        assert entry["headers"].get("access-control-allow-origin") == stack.page.origin, entry
        assert entry["headers"].get("access-control-allow-credentials") == "true", entry
    # The logout ended the session on the server: the browser's old cookie is worthless.
    cookie = next(e["cookie"] for e in seen if e["path"] == "/me/" and e["status"] == 200)
    assert api_request(stack, "GET", "/me/", Cookie=cookie)[0] == 401


def test_unlisted_origin_cannot_read_answers_nor_change_anything(stack, chromium, tmp_path, capsys):
    """The admin signs in on the real frontend, then the same page runs on a foreign origin.

    The browser holds a valid session cookie and sends it with the foreign page's requests
    too (same site), so what stops them is CORS in the browser and the Origin check on the
    server, not a missing cookie.
    """
    foreign = stack.foreign.origin
    foreign_url = page_url(foreign, stack, "login,me,edit,logout,me,forge")
    url = page_url(stack.page.origin, stack, "login", next=foreign_url)
    screenshot = stack.artifacts / "browser-unlisted-origin.png"
    report = run_browser(chromium, url, screenshot, tmp_path / "profile", capsys)

    [signed_in] = report["previous"]  # on the listed frontend, before moving on
    assert (signed_in["page"], signed_in["status"]) == (stack.page.origin, 200), signed_in

    # The foreign page's script could read nothing at all.
    assert report["origin"] == foreign
    steps = report["results"]
    assert [step["step"] for step in steps] == ["login", "me", "edit", "logout", "me", "forge"]
    for step in steps[:-1]:
        assert step.get("error", "").startswith("TypeError"), step
        assert "status" not in step and "body" not in step, step
    assert (steps[-1]["type"], steps[-1]["status"]) == ("opaque", 0), steps[-1]

    # What reached the server from the foreign origin, and what it answered.
    entries = stack.recorder.from_origin(foreign)
    for entry in entries:
        assert "access-control-allow-origin" not in entry["headers"], entry
        if entry["method"] != "OPTIONS":  # (preflights never carry cookies)
            assert entry["cookie"], entry  # the admin's session went along
    # No preflight was approved, so the browser never sent the JSON login nor the PUT; the
    # requests that need no preflight did arrive, and the unsafe ones were refused there.
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("OPTIONS", "/auth/login", 200),
        ("GET", "/me/", 200),  # answered, but hidden from the page
        ("OPTIONS", "/regions/slug/north", 200),
        ("POST", "/auth/logout", 403),
        ("GET", "/me/", 200),  # still signed in: that logout was refused
        ("POST", "/regions/", 403),  # the no-cors "simple" POST
    ]

    assert region_row(stack) == ("north", "North")
    with stack.app.app_context():
        assert db.session.scalars(select(Region.slug)).all() == ["north"]  # nothing forged

    # Even a client that skips the preflight and replays the browser's (still valid)
    # session with the foreign Origin cannot edit the region.
    cookie = next(e["cookie"] for e in entries if e["cookie"])
    assert api_request(stack, "GET", "/me/", Cookie=cookie)[0] == 200
    status, body = api_request(
        stack, "PUT", "/regions/slug/north", {"name": "Replayed"}, Cookie=cookie, Origin=foreign
    )
    assert (status, body["detail"]) == (403, REFUSED)
    assert region_row(stack) == ("north", "North")


def test_the_docs_page_lists_the_operations_from_the_services_own_assets(
    stack, chromium, tmp_path, capsys
):
    """API.md 13: /docs renders the document with assets the service ships (no CDN)."""
    screenshot = stack.artifacts / "browser-docs.png"
    dom = rendered_dom(chromium, f"{stack.api.origin}/docs", screenshot, tmp_path / "p", capsys)
    # Swagger UI lists each operation with its method and path.
    for method, path in [("get", "/regions/"), ("post", "/auth/login"), ("get", "/audit/")]:
        assert re.search(
            rf'opblock-summary-method">{method.upper()}<.*?data-path="{re.escape(path)}"',
            dom,
            re.DOTALL,
        ), f"{method.upper()} {path} is not listed"
    assert "Directory API" in dom
    fetched = {entry["path"]: entry["status"] for entry in stack.recorder.seen}
    assert fetched["/docs"] == 200
    assert fetched["/openapi.json"] == 200
    assert fetched["/docs/swagger-ui-bundle.js"] == 200
    assert fetched["/docs/init.js"] == 200


def test_a_public_vote_form_on_an_unlisted_site_submits_and_reads_the_answer(
    stack, chromium, tmp_path, capsys
):
    """Issue 18: the submission uses no credentials, so any site's form may post it."""
    url = page_url(stack.foreign.origin, stack, "vote")
    screenshot = stack.artifacts / "browser-public-form.png"
    report = run_browser(chromium, url, screenshot, tmp_path / "profile", capsys)
    [vote] = report["results"]
    assert vote["type"] == "cors"  # readable by the page
    assert (vote["status"], vote["body"]) == (202, {"status": "queued"})
    assert vote["requestId"]
    [sent] = [e for e in stack.recorder.from_origin(stack.foreign.origin) if e["method"] == "POST"]
    assert sent["cookie"] is None


def test_the_docs_page_authorizes_with_an_api_token(stack, chromium, tmp_path, capsys):
    """API.md 14: the document's bearer scheme works in the service's own Swagger UI: a
    token given to "Authorize" is what "Try it out" sends (no cookie in this browser)."""
    from directory_api.credentials import create_api_token
    from directory_api.models import User

    with stack.app.app_context():
        user = db.session.scalar(select(User).where(User.email == SUPER_EMAIL))
        token = create_api_token(
            user, {"name": "docs", "scopes": ["directory:read"], "expires_in_days": 1}, "dapi_"
        )
        db.session.commit()
        secret = token.secret
    query = urlencode({"api": stack.api.origin, "token": secret})
    report = run_browser(
        chromium,
        f"{stack.page.origin}/docs_token.html?{query}",
        stack.artifacts / "browser-docs-token.png",
        tmp_path / "p",
        capsys,
    )
    assert report["status"] == 200, report
    assert report["body"]["email"] == SUPER_EMAIL
    (asked,) = [
        entry
        for entry in stack.recorder.from_origin(stack.page.origin)
        if entry["path"] == "/me/" and entry["method"] == "GET"
    ]
    assert asked["status"] == 200 and asked["cookie"] is None


# Fills the example form as a visitor would and sends it once the widget has its solution.
VISITOR = """
<script type="module">
  const form = document.querySelector("form");
  const values = {
    yourName: "Val Voter", yourEmail: "val.voter@example.org", yourPhone: "+44 20 7946 0018",
    businessName: "Harbour Bakery", businessBranch: "Quay", voteBody: "Good bread, kind staff.",
  };
  for (const [name, value] of Object.entries(values)) form.elements[name].value = value;
  document.querySelector("altcha-widget").addEventListener("statechange", (event) => {
    // Once the widget has checked its box (the form's last required field).
    if (event.detail.state === "verified") setTimeout(() => form.requestSubmit(), 0);
  });
  // A request the test's page server holds open: virtual time (the dump's clock) stands
  // still while it loads, so the widget's workers solve in real time before the dump.
  fetch("/wait").catch(() => {});
</script>
"""


class WaitingPageHandler(PageHandler):
    """Serves a directory, and holds `GET /wait` for 3 s: while it loads, the page's
    virtual clock (which decides when Chromium dumps the DOM) stands still, and the
    widget's workers solve the challenge in real time (a thousand hashes here)."""

    def do_GET(self):
        if self.path != "/wait":
            return super().do_GET()
        time.sleep(3)
        self.send_response(204)
        self.end_headers()
        return None


def test_the_example_vote_form_solves_its_challenge_and_submits(stack, chromium, tmp_path, capsys):
    """API.md 17: docs/examples/vote-form.html as a site would publish it (its addresses
    replaced), on a site the API does not list, with challenges required: the widget the
    service serves fetches a challenge, solves it in the browser, and the form's plain POST
    carries the solution and is accepted."""
    from .conftest import queued_mail

    stack.app.config["VOTE_CHALLENGE"] = "required"
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "vote-form.html"
    page = (
        example.read_text()
        .replace("https://api.example.org", stack.api.origin)
        .replace("harbour-town", "harbour")
        .replace("</body>", VISITOR + "</body>")
    )
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "vote-form.html").write_text(page)
    handler = partial(WaitingPageHandler, directory=str(site_dir))
    site = Server(ThreadingHTTPServer(("127.0.0.1", 0), handler))
    try:
        dom = rendered_dom(
            chromium,
            f"{site.origin}/vote-form.html",
            stack.artifacts / "browser-vote-form.png",
            tmp_path / "profile",
            capsys,
        )
    finally:
        site.stop()
    asked = [(e["method"], e["path"], e["status"]) for e in stack.recorder.from_origin(site.origin)]
    assert 'auto="onload"' in page  # as published: the time trap counts from the page's load
    assert ("GET", "/docs/altcha.min.js", 200) in asked
    assert ("GET", "/locations/harbour/votes/challenge", 200) in asked
    assert ("POST", "/locations/harbour/votes/submit/btoc", 202) in asked, asked
    assert "queued" in dom, dom[:3000]
    with stack.app.app_context():
        [message] = queued_mail(template="vote")
        assert message.status == "pending"  # a person's: not held
        assert message.reply_to == "val.voter@example.org"
