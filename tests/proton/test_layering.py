"""The profiler's modules form layers: none reaches back up to a module that imports it, not even through
an import inside a function, so the writers can be loaded and tested without the code that feeds them."""
import ast
import graphlib
from pathlib import Path

import spine.proton
from spine.proton import capture, listeners, session

PACKAGE = Path(spine.proton.__file__).parent


def proton_imports(path: Path) -> set[str]:
    """The package's modules that one file imports, wherever in the file the import stands."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                parts = [node.module] if node.module else [a.name for a in node.names]
            elif node.level == 0 and (node.module or "").startswith("spine.proton."):
                parts = [node.module.split(".")[2]]
            else:
                parts = []
        elif isinstance(node, ast.Import):
            parts = [a.name.split(".")[2] for a in node.names if a.name.startswith("spine.proton.")]
        else:
            continue
        found |= {part.split(".")[0] for part in parts} & modules
    return found - {path.stem}


def import_graph() -> dict[str, set[str]]:
    return {path.stem: proton_imports(path) for path in PACKAGE.glob("*.py")}


def test_the_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert "output" in graph["cpu_profiler"]     # an import inside a function
    assert "session" in graph["triton_api"]      # `from . import session as sessions`
    assert graph["tree"] >= {"listeners", "records"}


def test_no_module_imports_one_above_it():
    graphlib.TopologicalSorter(import_graph()).prepare()   # raises CycleError naming the circle


def test_what_the_writers_read_imports_nothing_above_the_records():
    graph = import_graph()
    assert graph["records"] == set()
    assert graph["listeners"] == {"records"}
    for writer in ("tree", "trace", "table", "output", "capture"):
        assert "session" not in graph[writer], writer


def test_the_capture_session_joins_the_list_the_launches_are_handed_to():
    # driver/launcher.py gives session._sessions to the C++ launcher, which must see every listener
    assert session._sessions is listeners._sessions
    captured = capture.capture_session()
    assert captured in session._sessions and captured.capture
    assert capture.capture_session() is captured
