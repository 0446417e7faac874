"""GET /openapi.json: a valid OpenAPI 3.1 document listing every route, built from the schemas."""

import re
from typing import Any

import pytest
from openapi_spec_validator import validate

from directory_api.endpoints import declaration_of
from directory_api.openapi import openapi_path

from .test_votes import FULL_KEYS, PUBLIC_KEYS

METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH"}


@pytest.fixture
def document(client, app):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    return response.get_json()


def routes(app):
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) & METHODS):
            yield rule, method.lower()


def test_the_document_is_valid_openapi_3_1(document):
    validate(document)
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == "Directory API"


def test_every_route_of_the_app_is_documented(app, document):
    documented = {
        (path, method)
        for path, ops in document["paths"].items()
        for method in ops
        if method.upper() in METHODS
    }
    expected = {(openapi_path(rule), method) for rule, method in routes(app)}
    assert expected - documented == set()
    assert documented - expected == set()
    assert len(expected) >= 70


def test_protected_operations_name_their_role_the_cookie_and_the_token(app, document):
    scheme = document["components"]["securitySchemes"]["cookieAuth"]
    assert scheme == {**scheme, "type": "apiKey", "in": "cookie", "name": "session"}
    bearer = document["components"]["securitySchemes"]["bearerAuth"]
    assert bearer == {**bearer, "type": "http", "scheme": "bearer"}
    for rule, method in routes(app):
        op = document["paths"][openapi_path(rule)][method]
        access = declaration_of(app.view_functions[rule.endpoint]).access
        declaration = declaration_of(app.view_functions[rule.endpoint])
        if access:
            assert op["x-required-role"] == access, rule.rule
            scope = declaration.scope
            if not declaration.tokens:
                assert op["security"] == [{"cookieAuth": []}], rule.rule
            else:
                bearer_scopes = [str(scope)] if scope else []
                assert op["security"] == [{"cookieAuth": []}, {"bearerAuth": bearer_scopes}]
                assert op.get("x-required-scope") == (str(scope) if scope else None)
            assert {"401", "403"} <= set(op["responses"]), rule.rule
        elif declaration.public is not None:  # signing in shows more (API.md 13)
            assert op["security"] == [{}, {"cookieAuth": []}, {"bearerAuth": []}], rule.rule
        else:
            assert op["security"] == [], rule.rule  # public


def test_the_votes_reads_show_staff_fields_only_to_staff(document):
    paths = document["paths"]
    for path in ("/locations/{slug}/votes/", "/locations/{slug}/votes/id/{vote_id}"):
        assert paths[path]["get"]["security"] == [{}, {"cookieAuth": []}, {"bearerAuth": []}]
    vote = document["components"]["schemas"]["VoteOut"]
    staff_only = set(vote["properties"]) - set(vote["required"])
    assert staff_only == FULL_KEYS - PUBLIC_KEYS  # what test_votes sees the two views show
    assert all("Staff only" in vote["properties"][name]["description"] for name in staff_only)


def test_answers_list_every_field_they_always_show_as_required(document):
    """Generated clients type required fields as present (API.md 13)."""
    schemas = document["components"]["schemas"]
    for name in ("RegionOut", "ListingOut", "SocialLinkOut", "UserOut", "AuditEntryOut"):
        assert set(schemas[name]["required"]) == set(schemas[name]["properties"]), name
    for name, field in [("RegionOut", "createdAt"), ("UserOut", "lastLoginAt")]:
        assert schemas[name]["properties"][field]["format"] == "date-time"
    assert schemas["UserOut"]["properties"]["lastLoginAt"]["type"] == ["string", "null"]


def test_every_operation_lists_what_nginx_answers_in_front_of_it(document):
    """414 and 431 come from nginx (deploy/nginx.conf), as problems; there is no 408 (a
    client that stops talking is disconnected). Issue 35: generated clients lacked them."""
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method not in ("get", "put", "post", "patch", "delete"):
                continue
            for status in ("414", "431"):
                answer = op["responses"][status]
                assert "application/problem+json" in answer["content"], (path, method, status)
            assert "408" not in op["responses"], (path, method)


def test_the_document_has_servers_a_license_and_points_to_the_docs(document):
    assert document["servers"] == [{"url": "/", "description": "This service."}]
    assert document["info"]["license"] == {"name": "Proprietary"}
    assert "/docs" in document["info"]["description"]


@pytest.mark.parametrize(
    ("path", "method", "role"),
    [
        ("/regions/", "post", "super"),
        ("/locations/slug/{slug}", "put", "owner"),
        ("/locations/{slug}/owners/", "post", "super"),
        ("/locations/{slug}/admins/", "post", "owner"),
        ("/locations/{slug}/businesses/", "post", "access"),
        ("/locations/{slug}/votes/", "put", "access"),
        ("/me/", "get", "login"),
        ("/supers/", "get", "super"),
        ("/supers/pending/", "get", "super"),
        ("/supers/pending/id/{user_id}", "delete", "super"),
        ("/locations/{slug}/owners/pending/", "get", "super"),
        ("/locations/{slug}/owners/pending/id/{user_id}", "delete", "super"),
        ("/locations/{slug}/admins/pending/", "get", "owner"),
        ("/locations/{slug}/admins/pending/id/{user_id}", "delete", "owner"),
    ],
)
def test_roles_match_the_contract(document, path, method, role):
    assert document["paths"][path][method]["x-required-role"] == role


def test_errors_are_problem_details(document):
    assert "Problem" in document["components"]["schemas"]
    op = document["paths"]["/regions/"]["post"]
    for status in ("400", "401", "403", "409", "413", "415", "422", "500", "503"):
        content = op["responses"][status]["content"]
        assert content["application/problem+json"]["schema"] == {
            "$ref": "#/components/schemas/Problem"
        }
    assert "429" in document["paths"]["/auth/login"]["post"]["responses"]


@pytest.mark.parametrize("kind", ["businesses", "employers", "votes"])
def test_exports_document_their_limit_and_their_cap(document, kind):
    op = document["paths"][f"/locations/{{slug}}/{kind}/export.csv"]["get"]
    assert "text/csv" in op["responses"]["200"]["content"]
    assert op["responses"]["429"]["description"] == (
        "Rate limited, or too many exports streaming at once; see Retry-After."
    )


def test_lists_document_paging_and_their_filters(document):
    op = document["paths"]["/locations/"]["get"]
    names = {p["name"] for p in op["parameters"] if p["in"] == "query"}
    assert {"page", "perPage", "sort", "directoryLocation", "region"} <= names
    page = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    page_schema = document["components"]["schemas"][page.rsplit("/", 1)[-1]]
    assert set(page_schema["properties"]) == {"items", "page", "perPage", "total"}


def test_bodies_come_from_the_validating_schemas(document):
    schemas = document["components"]["schemas"]

    def body(path, method):
        ref = document["paths"][path][method]["requestBody"]["content"]["application/json"]
        return schemas[ref["schema"]["$ref"].rsplit("/", 1)[-1]]

    assert body("/regions/", "post")["required"] == ["name"]
    assert body("/regions/slug/{item_slug}", "put")["required"] == []  # updates are partial
    btob = body("/locations/{slug}/votes/submit/btob", "post")
    btoc = body("/locations/{slug}/votes/submit/btoc", "post")
    employer = body("/locations/{slug}/votes/submit/employer", "post")
    assert "yourBusiness" in btob["required"] and "yourBusiness" not in btoc["properties"]
    assert "yourPosition" in employer["required"] and "yourPosition" not in btob["properties"]
    assert btoc["additionalProperties"] is False
    forms = document["paths"]["/locations/{slug}/votes/submit/btoc"]["post"]["requestBody"]
    # Form fields under a schema of their own: a generated client tells the two apart.
    form = forms["content"]["application/x-www-form-urlencoded"]["schema"]["$ref"]
    assert form.endswith("/BtocSubmissionForm")
    assert schemas["BtocSubmissionForm"]["properties"] == btoc["properties"]
    assert "multipart/form-data" in forms["description"]
    assert document["paths"]["/locations/{slug}/votes/submit/employer"]["post"]["responses"]["201"]


def test_path_parameters_carry_their_formats(document):
    params = {
        p["name"]: p["schema"] for p in document["paths"]["/regions/id/{item_id}"]["parameters"]
    }
    assert params["item_id"] == {"type": "string", "format": "uuid"}
    params = {
        p["name"]: p["schema"] for p in document["paths"]["/regions/slug/{item_slug}"]["parameters"]
    }
    assert params["item_slug"]["pattern"].startswith("^[a-z0-9]")


def test_an_undeclared_route_stops_the_app_at_start_up():
    """A route whose view lost its @endpoint (e.g. wrapped by another decorator) would drop
    out of the document and the body rule; the app refuses to start instead."""
    from functools import wraps

    from flask import Flask

    from directory_api.endpoints import check_declared, endpoint

    def logged(view):
        @wraps(view)
        def wrapper(**kwargs):
            return view(**kwargs)

        return wrapper

    app = Flask(__name__)

    @app.get("/declared")
    @endpoint()
    def declared():
        """Declared."""

    check_declared(app)

    @app.get("/wrapped")
    @logged
    @endpoint()
    def wrapped():
        """Wrapped above its declaration."""

    with pytest.raises(LookupError, match="wrapped"):
        check_declared(app)


def test_a_view_without_a_description_breaks_the_document(app_factory):
    from directory_api.openapi import build_openapi

    app = app_factory()

    @app.get("/undocumented")
    def undocumented():
        return {}

    with pytest.raises(LookupError, match="undocumented"):
        build_openapi(app)


# Found by fuzzing the document (tests/test_fuzz.py): it has to say what the schemas accept.


def conforms(schema: dict, value) -> bool:
    from jsonschema import Draft202012Validator, FormatChecker

    return Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(value)


def test_text_fields_document_what_validation_accepts(document):
    schemas = document["components"]["schemas"]
    name = schemas["RegionIn"]["properties"]["name"]  # required, one line
    assert name["maxLength"] == 200
    assert [conforms(name, v) for v in ("Café", " North ", "", "  ", "a\nb", "a\x00")] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    address = schemas["LocationIn"]["properties"]["address"]  # optional: "" and null clear it
    assert all(conforms(address, v) for v in ("", "  ", None, "1 Quay"))
    description = schemas["LocationIn"]["properties"]["description"]  # several lines
    assert conforms(description, "one\ntwo") and not conforms(description, "bell\x07")
    slug = schemas["RegionIn"]["properties"]["slug"]
    assert conforms(slug, "north-2") and not conforms(slug, "") and not conforms(slug, "North")
    region = schemas["LocationIn"]["properties"]["region"]  # a reference that may be cleared
    assert conforms(region, "") and conforms(region, None) and not conforms(region, "No!")
    phone = schemas["LocationIn"]["properties"]["phone"]
    assert conforms(phone, "+44 20 7946 0000") and not conforms(phone, "call me")
    website = schemas["LocationIn"]["properties"]["website"]
    assert conforms(website, "https://harbour.example.org/a?b") and not conforms(website, "ftp://x")
    email = schemas["InviteIn"]["properties"]["email"]
    assert email["format"] == "email" and email["minLength"] == 1
    assert conforms(schemas["LocationIn"]["properties"]["email"], "")
    password = schemas["RegisterIn"]["properties"]["password"]
    assert (password["minLength"], password["maxLength"]) == (10, 128)


def test_the_documented_text_rules_match_validation(client, super_client):
    """What the document refuses, the API refuses (and the other way round)."""
    assert super_client.post("/regions/", json={"name": "  "}).status_code == 422
    assert super_client.post("/regions/", json={"name": "a\nb"}).status_code == 422
    assert super_client.post("/regions/", json={"name": " North "}).status_code == 201
    response = super_client.post("/locations/", json={"name": "Quay", "address": "  "})
    assert response.status_code == 201 and response.get_json()["address"] is None


def test_paths_that_differ_only_in_parameter_names_are_one_path(app, document):
    shapes: dict[str, str] = {}
    for path in document["paths"]:
        shape = re.sub(r"\{[^}]*\}", "{}", path)
        assert shape not in shapes, f"{path} and {shapes[shape]} are the same path"
        shapes[shape] = path
    assert set(document["paths"]["/locations/slug/{slug}"]) >= {"get", "put", "delete"}
    assert set(document["paths"]["/regions/slug/{item_slug}"]) >= {"get", "put", "delete"}


def test_problems_may_carry_extension_members(document):
    problem = document["components"]["schemas"]["Problem"]
    assert problem["additionalProperties"] is True
    assert {"usedBy", "requestId", "fields"} <= set(problem["properties"])


def test_bodies_that_name_a_target_say_so_in_words(document):
    """As `anyOf` of two `required`, generated clients typed these bodies `Any`."""
    schemas = document["components"]["schemas"]
    for name in ("Target", "CategoryUpdate", "SocialUpdate", "ListingUpdate"):
        assert "anyOf" not in schemas[name]
        assert "one of the two is required" in schemas[name]["description"], name
    assert conforms(schemas["Target"], {"slug": "cafes"})


@pytest.mark.parametrize(
    "path", ["/supers/", "/locations/{slug}/owners/", "/locations/{slug}/votes/"]
)
def test_sort_parameters_name_their_fields(document, path):
    (sort,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "sort"]
    assert conforms(sort["schema"], "-createdAt") and not conforms(sort["schema"], "password")


def test_views_can_document_sort_fields_and_path_constraints(app_factory):
    from directory_api.endpoints import endpoint
    from directory_api.models import Region
    from directory_api.openapi import build_openapi
    from directory_api.platform.pagination import ListArgs
    from directory_api.schemas.regions import RegionOut

    app = app_factory()

    @app.get("/things/<term>")
    @endpoint(
        response=RegionOut,
        query=ListArgs.sorted_by({"name": Region.name}),
        paged=True,
        path={"term": {"minLength": 2}},
    )
    def things(args, term):
        """Things."""
        return {}

    op = build_openapi(app)["paths"]["/things/{term}"]
    (term,) = op["parameters"]
    assert term["schema"] == {"type": "string", "minLength": 2}
    (sort,) = [p for p in op["get"]["parameters"] if p["name"] == "sort"]
    assert conforms(sort["schema"], "-name,name") and not conforms(sort["schema"], "slug")


@pytest.mark.parametrize(
    "path", ["/supers/", "/locations/{slug}/owners/", "/locations/{slug}/admins/"]
)
def test_invitations_document_both_answer_shapes(document, path):
    """A new user in full; an account that existed only as id, e-mail and status (API.md 9)."""
    schemas = document["components"]["schemas"]
    answer = document["paths"][path]["post"]["responses"]["201"]["content"]["application/json"]
    refs = [shape["$ref"].rsplit("/", 1)[-1] for shape in answer["schema"]["anyOf"]]
    assert refs == ["UserOut", "ExistingUserOut"]
    existing = schemas["ExistingUserOut"]
    assert set(existing["properties"]) == set(existing["required"]) == {"id", "email", "status"}
    short = {"id": "6f1c3a52-1d1e-4b8e-9d43-3b1f0a4b2c10", "email": "a@b.org", "status": "active"}
    assert conforms(existing, short) and not conforms(existing, {**short, "name": "Ann"})


@pytest.mark.parametrize(
    "path", ["/supers/", "/locations/{slug}/owners/", "/locations/{slug}/admins/"]
)
def test_pending_offers_are_documented(document, path):
    """A page of `{"id", "email", "offeredAt", "expiresAt"}`, all always there (API.md 18)."""
    schemas = document["components"]["schemas"]
    listed = document["paths"][f"{path}pending/"]["get"]
    page = listed["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    items = schemas[page.rsplit("/", 1)[-1]]["properties"]["items"]["items"]["$ref"]
    offer = schemas[items.rsplit("/", 1)[-1]]
    fields = {"id", "email", "offeredAt", "expiresAt"}
    assert set(offer["properties"]) == set(offer["required"]) == fields
    assert offer["properties"]["expiresAt"]["format"] == "date-time"
    (sort,) = [p for p in listed["parameters"] if p["name"] == "sort"]
    assert conforms(sort["schema"], "-offeredAt,email") and not conforms(sort["schema"], "role")
    withdrawn = document["paths"][f"{path}pending/id/{{user_id}}"]["delete"]
    assert {"204", "401", "403", "404"} <= set(withdrawn["responses"])


def test_accepting_a_role_offer_is_documented(document):
    op = document["paths"]["/me/roles/accept/{token}"]["post"]
    assert op["x-required-role"] == "login"
    assert {"200", "401", "404", "429"} <= set(op["responses"])


def test_the_root_says_what_this_is_and_where_the_docs_are(client):
    response = client.get("/")
    assert response.status_code == 200
    assert response.get_json() == {
        "name": "Directory API",
        "version": "1.0.0",
        "docs": "/docs",
        "openapi": "/openapi.json",
    }


def test_one_version_in_the_package_the_root_the_document_and_the_changelog(client, document):
    """setup.cfg's version is what `GET /`, the OpenAPI document, the installed package
    and the newest CHANGELOG.md entry say (issue 35: they said 1.0.0 and 0.1.0)."""
    import configparser
    import re
    from importlib import metadata
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    parser = configparser.ConfigParser()
    parser.read(root / "setup.cfg")
    version = parser["metadata"]["version"]
    assert client.get("/").get_json()["version"] == version
    assert document["info"]["version"] == version
    assert metadata.version("directory-api") == version  # `make install` installed this one
    newest = re.search(r"^## \[(\d[^\]]*)\]", (root / "CHANGELOG.md").read_text(), re.M)
    assert newest is not None and newest.group(1) == version


def test_the_docs_page_uses_only_assets_the_service_serves(client):
    page = client.get("/docs")
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    text = page.get_data(as_text=True)
    assert '"/docs/swagger-ui-bundle.js"' in text and '"/docs/init.js"' in text
    assert 'data-url="/openapi.json"' in text
    assert "//" not in text.replace("<!--", "")  # no other host: no CDN, works offline
    script = client.get("/docs/swagger-ui-bundle.js")
    assert script.status_code == 200
    assert script.mimetype in {"text/javascript", "application/javascript"}
    assert len(script.data) > 100_000
    # Everywhere else the policy forbids everything.
    assert client.get("/regions/").headers["Content-Security-Policy"] == (
        "default-src 'none'; frame-ancestors 'none'"
    )


def test_docs_assets_are_revalidated_with_their_etag(client):
    first = client.get("/docs/swagger-ui.css")
    assert first.status_code == 200 and first.headers["ETag"]
    again = client.get("/docs/swagger-ui.css", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304 and again.data == b""


def test_only_the_docs_own_assets_are_served(client):
    assert client.get("/docs/").status_code == 200  # one endpoint with /docs, as every path
    for path in ("/docs/index.html", "/docs/../config.py", "/docs/LICENSE", "/docs/docs.html"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.mimetype == "application/problem+json"


def objects_without_required(node: Any, where: str = "") -> list[str]:
    """Where in `node` an object lists its properties but not which are required."""
    found = []
    if isinstance(node, dict):
        if "properties" in node and "required" not in node:
            found.append(where or "/")
        for key, value in node.items():
            found += objects_without_required(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += objects_without_required(value, f"{where}[{index}]")
    return found


def test_every_object_lists_its_required_fields(document):
    """Nested ones too (a user's roles[] items): a generated client types them exactly."""
    assert objects_without_required(document) == []
    roles = document["components"]["schemas"]["UserOut"]["properties"]["roles"]["items"]
    assert roles["required"] == ["location", "role"]


def test_an_object_without_required_is_found():
    """The check above can fail."""
    node = {"a": {"properties": {"x": {}}}, "b": [{"properties": {}, "required": []}]}
    assert objects_without_required(node) == ["/a"]
