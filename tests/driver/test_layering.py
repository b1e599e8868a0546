"""The driver's modules and the C runtime's files stand in layers: no import circle among spine/driver's
modules (imports inside functions included), and no #include circle among cpp/'s files (a .c file and its
.h count as one). Both failed with a CycleError on the earlier layout: executor.py imported native.py and
qemu.py, which imported executor.py back for the thread count; grid.c called the profiler's program hooks
while profile_buffers.c ran grids."""
import ast
import graphlib
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = os.path.join(ROOT, "spine", "driver")
CPP = os.path.join(ROOT, "cpp")


def _driver_imports(source: str, modules: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spine.driver."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.ImportFrom) and node.module == "spine.driver":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("spine.driver.")}
    return found & modules


def test_driver_modules_import_no_circle():
    modules = {name[:-3] for name in os.listdir(DRIVER) if name.endswith(".py")}
    graph = {}
    for module in modules:
        with open(os.path.join(DRIVER, module + ".py")) as f:
            graph[module] = _driver_imports(f.read(), modules) - {module}
    order = list(graphlib.TopologicalSorter(graph).static_order())   # raises CycleError on a circle
    assert order.index("settings") < min(order.index(m) for m in ("native", "qemu", "remote", "launcher"))
    assert order.index("executor") > max(order.index("native"), order.index("qemu"))


def test_runtime_sources_include_no_circle():
    graph: dict[str, set[str]] = {}
    for name in os.listdir(CPP):
        unit = os.path.splitext(name)[0]
        with open(os.path.join(CPP, name), errors="replace") as f:
            included = {os.path.splitext(h)[0] for h in re.findall(r'#include\s+"([^"]+)"', f.read())}
        graph.setdefault(unit, set()).update(included - {unit})
    assert graph["grid"] <= {"fault_guard", "openmp_team"}, "the grid stands on the fault guard and the team"
    assert graph["openmp_team"] == set(), "finding the OpenMP runtime needs nothing of ours"
    assert "grid" in graph["profile_buffers"]
    list(graphlib.TopologicalSorter(graph).static_order())   # raises CycleError on a circle
