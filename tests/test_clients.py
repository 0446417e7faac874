"""Integrators' view of the OpenAPI document (API.md 13): a client generated from it with
openapi-python-client imports and works, and Redocly's recommended rules pass.

The generator is a test dependency (CI installs it); Redocly CLI comes from the npm registry
through `npx`. Without `npx` the lint test skips, unless CI or REQUIRE_LINT=1 is set.
"""

import contextvars
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from directory_api.platform.extensions import db

from .conftest import signed_in
from .factories import PASSWORD, make_listing, make_location, make_user

ROOT = Path(__file__).resolve().parent.parent
REDOCLY = "@redocly/cli@2.77.0"
PACKAGE = "generated_directory_client"


def document(app) -> dict:
    response = app.test_client().get("/openapi.json")
    assert response.status_code == 200
    return response.get_json()


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The client package generated from the live document, imported."""
    from config import TestingConfig
    from directory_api import create_app

    where = tmp_path_factory.mktemp("client")
    app = create_app(
        "testing", SQLALCHEMY_DATABASE_URI="sqlite://", SESSION_FILE_DIR=str(where / "s")
    )
    assert TestingConfig  # the document depends on the routes alone
    spec = where / "openapi.json"
    spec.write_text(json.dumps(document(app)))
    generator = Path(sys.executable).with_name("openapi-python-client")
    finished = subprocess.run(  # noqa: S603
        [str(generator), "generate", "--path", str(spec), "--meta", "none",
         "--output-path", str(where / PACKAGE)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PATH": f"{generator.parent}:{os.environ.get('PATH', '')}"},
    )  # fmt: skip
    assert finished.returncode == 0, finished.stdout + finished.stderr
    # Only the CSV imports are left out: a text/csv body is not something it generates.
    warnings = [line for line in finished.stdout.splitlines() if line.startswith("WARNING")]
    assert all("/import " in line for line in warnings), finished.stdout
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))
        for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
            del sys.modules[name]


def transport(app) -> httpx.WSGITransport:
    """The app as a server runs it: each request in a context of its own (not the test's,
    where Flask-Login would keep the last signed-in user), reading what the test wrote."""

    def application(environ, start_response):
        db.session.rollback()
        return contextvars.Context().run(lambda: list(app(environ, start_response)))

    return httpx.WSGITransport(app=application)


def module(package, name: str):
    return importlib.import_module(f"{package.__name__}.{name}")


def test_every_generated_module_imports(generated):
    import pkgutil

    names = [info.name for info in pkgutil.walk_packages(generated.__path__, PACKAGE + ".")]
    assert len(names) > 100
    for name in names:
        importlib.import_module(name)


def test_a_generated_client_signs_in_lists_creates_and_submits_a_vote(app, generated):
    make_user("super@example.com", is_super=True)
    harbour = make_location("harbour")
    make_listing("employer", harbour, "harbour-works", name="Harbour Works")
    client = module(generated, "client").Client(
        base_url="http://127.0.0.1",
        httpx_args={"transport": transport(app)},
        raise_on_unexpected_status=True,
    )
    models = module(generated, "models")

    with client as session:
        login = module(generated, "api.auth.auth_login")
        me = login.sync(
            client=session, body=models.LoginIn(email="super@example.com", password=PASSWORD)
        )
        assert isinstance(me, models.UserOut)
        assert me.is_super is True and me.email == "super@example.com"

        create = module(generated, "api.regions.regions_create_item")
        made = create.sync(client=session, body=models.RegionIn(name="North Coast"))
        assert isinstance(made, models.RegionOut)
        assert made.slug == "north-coast"
        assert made.created_at.tzinfo is not None  # a datetime, not a string

        listed = module(generated, "api.regions.regions_list").sync(client=session)
        assert [region.slug for region in listed.items] == ["north-coast"]
        assert listed.total == 1

        submit = module(generated, "api.votes.votes_submit_employer")
        vote = models.EmployerSubmission(
            your_name="Ann Voter",
            your_email="ann.voter@example.org",
            your_phone="+44 100 000 000",
            business_name="Harbour Works",
            business_branch="Quay",
            vote_body="A fine place to work.",
            your_position="Clerk",
        )
        received = submit.sync(slug="harbour", client=session, body=vote)
        assert isinstance(received, models.ReceivedOut)
        assert received.status == "received"

        # The two CSV imports are the operations it leaves out (a text/csv body): the
        # generated client's own httpx client calls them, signed in the same (README).
        imported = session.get_httpx_client().post(
            "/locations/harbour/employers/import",
            content=b"name,branch\nQuay Mill,Quay\n",
            headers={"Content-Type": "text/csv"},
        )
        assert imported.status_code == 200, imported.text
        assert imported.json() == {"created": 1, "updated": 0, "unchanged": 0, "dryRun": False}

        votes = module(generated, "api.votes.votes_list_votes").sync(slug="harbour", client=session)
        [seen] = votes.items
        assert str(seen.id) == str(received.id)
        assert seen.your_email == "ann.voter@example.org"  # staff see the contact

    # Anyone reads votes too; the staff-only fields are then absent, which the types allow.
    public = module(generated, "client").Client(
        base_url="http://127.0.0.1", httpx_args={"transport": transport(app)}
    )
    staff = signed_in(app, "super@example.com")
    assert (
        staff.put(
            "/locations/harbour/votes/", json={"id": str(received.id), "active": True}
        ).status_code
        == 200
    )
    [shown] = (
        module(generated, "api.votes.votes_list_votes").sync(slug="harbour", client=public).items
    )
    assert shown.business_name == "Harbour Works"
    assert isinstance(shown.your_email, module(generated, "types").Unset)


def test_redocly_recommended_rules_pass(app, tmp_path):
    npx = shutil.which("npx")
    if npx is None:
        reason = "npx not found (Node.js): Redocly CLI runs through it"
        if any(
            os.environ.get(name, "").lower() in {"1", "true"} for name in ("CI", "REQUIRE_LINT")
        ):
            pytest.fail(reason)
        pytest.skip(reason)
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(document(app)))
    finished = subprocess.run(  # noqa: S603
        [npx, "--yes", REDOCLY, "lint", str(spec), "--config", str(ROOT / "redocly.yaml"),
         "--format", "summary"],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )  # fmt: skip
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output
    assert "error" not in output.lower().replace("0 errors", ""), output


def token_body(models, name: str):
    """A generated client's body for a token that writes the directory."""
    return models.TokenIn(
        name=name, password=PASSWORD, scopes=[models.TokenInScopesItem("directory:write")]
    )


def test_a_generated_authenticated_client_works_with_a_token_made_by_a_session(app, generated):
    """API.md 14: a session makes the token (those operations take a session only; the
    generator types them `AuthenticatedClient` as they need credentials, and the signed-in
    `Client` carries its cookie); the generated `AuthenticatedClient` then sends it."""
    make_user("super@example.com", is_super=True)
    models = module(generated, "models")
    signed = module(generated, "client").Client(
        base_url="http://127.0.0.1",
        httpx_args={"transport": transport(app)},
        raise_on_unexpected_status=True,
    )
    with signed as session:
        module(generated, "api.auth.auth_login").sync(
            client=session, body=models.LoginIn(email="super@example.com", password=PASSWORD)
        )
        made = module(generated, "api.tokens.tokens_create_token").sync(
            client=session,
            body=token_body(models, "generated"),
        )
    assert isinstance(made, models.NewTokenOut), made
    assert made.token.startswith("dapi_")

    with module(generated, "client").AuthenticatedClient(
        base_url="http://127.0.0.1",
        token=made.token,
        httpx_args={"transport": transport(app)},
        raise_on_unexpected_status=True,
    ) as scripted:
        region = module(generated, "api.regions.regions_create_item").sync(
            client=scripted, body=models.RegionIn(name="South Bay")
        )
        assert isinstance(region, models.RegionOut)
        assert region.slug == "south-bay"
        # The token's scopes hold: minting another one takes a session, never a token.
        refused = module(generated, "api.tokens.tokens_create_token").sync_detailed(
            client=scripted,
            body=token_body(models, "again"),
        )
        assert refused.status_code == 403, refused.content
        assert b"session" in refused.content, refused.content
    rows = db.session.execute(db.text("SELECT slug FROM regions")).scalars().all()
    assert rows == ["south-bay"]
