"""The layers of docs/architecture.md hold: every import in tfplace/ points down, none forms a circle,
and the core (data model, placers, simulator) places and simulates a graph without TensorFlow."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import networkx as nx
import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "tfplace"

_BELOW_THE_TOP = {
    "tfplace.core",
    "tfplace.simulator",
    "tfplace.split",
    "tfplace.placer",
    "tfplace.tf_graph",
    "tfplace.estimator",
}

MAY_IMPORT = {
    "tfplace.core": {"tfplace.core"},
    "tfplace.simulator": {"tfplace.core", "tfplace.simulator"},
    "tfplace.split": {"tfplace.core", "tfplace.simulator", "tfplace.split"},
    "tfplace.placer": {"tfplace.core", "tfplace.simulator", "tfplace.split", "tfplace.placer"},
    "tfplace.tf_graph": {"tfplace.core", "tfplace.split", "tfplace.tf_graph"},
    "tfplace.estimator": {"tfplace.core", "tfplace.tf_graph", "tfplace.estimator"},
    "tfplace": _BELOW_THE_TOP | {"tfplace"},
    "tfplace.cli": _BELOW_THE_TOP | {"tfplace", "tfplace.cli"},
}
"""Layer -> the layers its modules may import (docs/architecture.md). A module belongs to the
longest layer its name starts with: ``tfplace`` itself is the top (API, runner, plots), and the
CLI sits on it."""

TENSORFLOW_FREE = {"tfplace.core", "tfplace.simulator", "tfplace.split", "tfplace.placer"}
"""Layers that must not import TensorFlow, not even inside a function."""

PROGRAMS = {"experiments", "models", "benchmarks", "run_experiments"}
"""The repository's programs on top of the plugin, which no module of it may import."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


ENTRY_POINTS = {"tfplace.__main__": "tfplace.cli"}
"""Modules that only start a program (``python -m tfplace``): they belong to the layer they start."""


def _layer(module: str) -> str:
    if module in ENTRY_POINTS:
        return ENTRY_POINTS[module]
    return max((layer for layer in MAY_IMPORT if module == layer or module.startswith(layer + ".")), key=len)


def _imports(module: str) -> set[str]:
    """Every module ``module`` imports, at module level or inside a function; ``from package import
    name`` counts as the submodule when ``name`` is one."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in MODULES else base)
    return found


IMPORTS = {module: _imports(module) for module in MODULES}


def test_the_layer_table_names_every_package_of_tfplace():
    packages = {module for module, path in MODULES.items() if path.name == "__init__.py"}
    assert packages == set(MAY_IMPORT)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_import_points_down_the_layers(module):
    layer = _layer(module)
    upward = sorted(
        target
        for target in IMPORTS[module]
        if target.partition(".")[0] == "tfplace" and _layer(target) not in MAY_IMPORT[layer]
    )
    assert not upward, f"{module} ({layer}) imports {upward}; it may import {sorted(MAY_IMPORT[layer])}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_of_the_plugin_imports_the_repository_programs(module):
    assert not {target.partition(".")[0] for target in IMPORTS[module]} & PROGRAMS


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) in TENSORFLOW_FREE))
def test_the_core_layers_never_import_tensorflow(module):
    assert "tensorflow" not in {target.partition(".")[0] for target in IMPORTS[module]}


def test_no_import_circle_between_modules():
    graph = nx.DiGraph(
        (module, target) for module, targets in IMPORTS.items() for target in targets if target in MODULES
    )
    graph.remove_edges_from(nx.selfloop_edges(graph))
    assert list(nx.simple_cycles(graph)) == []


def test_the_import_scan_sees_function_level_imports():
    assert "tfplace.placer.auto" not in IMPORTS["tfplace.placer"]  # loaded by name from the table
    assert "tfplace.simulator" in IMPORTS["tfplace.placer"]  # imported inside place_cost_graph
    assert "tfplace.tf_graph.importer" in IMPORTS["tfplace.api"]  # imported inside estimate_costs


CORE_WITHOUT_TENSORFLOW = textwrap.dedent(
    """
    import sys


    class NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "tensorflow":
                raise ImportError(f"{name} is made unimportable")
            return None


    sys.meta_path.insert(0, NoTensorFlow())
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the blocker let tensorflow through")

    from tfplace.core.devices import DeviceSet
    from tfplace.core.synthetic import layered_training_graph
    from tfplace.placer import place_cost_graph
    from tfplace.simulator import simulate

    graph = layered_training_graph(120, seed=3)
    devices = DeviceSet.parse("/device:GPU:0-2", "40MB")
    for placer in ("celeritas", "m_etf"):
        placement = place_cost_graph(graph, devices, placer)
        assert set(placement.assignment) == set(graph), placer
        result = simulate(graph, placement.assignment, devices)
        print(placer, len(set(placement.assignment.values())), result.makespan > 0)
    print("tensorflow" in sys.modules)
    """
)


def test_the_core_places_and_simulates_with_tensorflow_unimportable():
    done = subprocess.run(
        [sys.executable, "-c", CORE_WITHOUT_TENSORFLOW], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0].split()[0] == "celeritas" and lines[0].split()[2] == "True"
    assert lines[1].split()[0] == "m_etf" and lines[1].split()[2] == "True"
    assert lines[2] == "False"


def test_the_placer_table_loads_only_modules_of_the_placer_layer():
    from tfplace.placer import PLACERS

    modules = {target.partition(":")[0] for target in PLACERS.values()}
    assert modules <= {module for module in MODULES if _layer(module) == "tfplace.placer"}
