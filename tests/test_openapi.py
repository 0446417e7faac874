"""GET /openapi.json: a valid OpenAPI 3.1 document listing every route, built from the schemas."""

import pytest
from openapi_spec_validator import validate

from directory_api.openapi import openapi_path

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


def test_protected_operations_name_their_role_and_the_cookie(app, document):
    scheme = document["components"]["securitySchemes"]["cookieAuth"]
    assert scheme == {**scheme, "type": "apiKey", "in": "cookie", "name": "session"}
    for rule, method in routes(app):
        op = document["paths"][openapi_path(rule)][method]
        access = getattr(app.view_functions[rule.endpoint], "access", None)
        if access:
            assert op["x-required-role"] == access, rule.rule
            assert op["security"] == [{"cookieAuth": []}]
            assert {"401", "403"} <= set(op["responses"]), rule.rule
        else:
            assert "security" not in op, rule.rule


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
    assert "required" not in body("/regions/slug/{slug}", "put")  # updates are partial
    btob = body("/locations/{slug}/votes/submit/btob", "post")
    btoc = body("/locations/{slug}/votes/submit/btoc", "post")
    employer = body("/locations/{slug}/votes/submit/employer", "post")
    assert "yourBusiness" in btob["required"] and "yourBusiness" not in btoc["properties"]
    assert "yourPosition" in employer["required"] and "yourPosition" not in btob["properties"]
    assert btoc["additionalProperties"] is False
    forms = document["paths"]["/locations/{slug}/votes/submit/btoc"]["post"]["requestBody"]
    assert "application/x-www-form-urlencoded" in forms["content"]
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


def test_a_view_without_a_description_breaks_the_document(app_factory):
    from directory_api.openapi import build_openapi

    app = app_factory()

    @app.get("/undocumented")
    def undocumented():
        return {}

    with pytest.raises(LookupError, match="undocumented"):
        build_openapi(app)
