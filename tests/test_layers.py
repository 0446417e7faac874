"""The package's structure as a contract (issue 29): no module imports, directly or
through others, one that imports it back (an import inside a function counts too: it is
a circle all the same, only hidden); the platform imports nothing above it, and the
import-linter contract that says so (setup.cfg, `make lint`) names every module above."""

import configparser
from pathlib import Path

import grimp

SETUP_CFG = Path(__file__).resolve().parent.parent / "setup.cfg"
PLATFORM = "directory_api.platform"


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The groups of modules that import each other round (Tarjan's strongly connected
    components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_of_the_package_imports_itself_round_a_circle():
    assert circles(grimp.build_graph("directory_api")) == []


def test_a_circle_is_found():
    """The check above can fail: two modules importing each other are one circle."""
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert circles(graph) == [["pkg.a", "pkg.b"]]


def test_the_platform_imports_nothing_above_it():
    graph = grimp.build_graph("directory_api")
    above = {
        (module, imported)
        for module in graph.find_descendants(PLATFORM)
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith("directory_api") and not imported.startswith(PLATFORM)
    }
    assert above == set()


def test_the_import_linter_contract_forbids_every_module_above_the_platform():
    """A module added at the top level is in the contract's list, or this fails."""
    config = configparser.ConfigParser()
    config.read(SETUP_CFG)
    contract = config["importlinter:contract:platform"]
    assert contract["source_modules"].split() == [PLATFORM]
    graph = grimp.build_graph("directory_api")
    top = {m for m in graph.find_children("directory_api")} - {PLATFORM}
    assert set(contract["forbidden_modules"].split()) == top


def test_the_top_level_holds_few_modules():
    """The house is not flat: the platform's modules live below it, the rest in packages."""
    graph = grimp.build_graph("directory_api")
    modules = [m for m in graph.find_children("directory_api") if not graph.find_children(m)]
    assert len(modules) < 15, sorted(modules)
