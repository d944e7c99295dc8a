"""The package's structure: an import graph without cycles, and one environment registry.

The graph is read from the source with `ast`, so every import counts: module level,
inside functions and under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"evoharness_rl": ROOT / "evoharness_rl", "evoharness_rl.envs": ROOT / "envs"}
REGISTRY = "evoharness_rl.envs"  # envs/__init__.py


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[0] == "envs" and package == "evoharness_rl":
                continue  # a checkout may link evoharness_rl/envs to envs/: read it once, as evoharness_rl.envs
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


MODULES = _modules()


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules an import statement loads (the deepest known module of each name)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            package = package[:len(package) - node.level + 1]
            base = ".".join(package + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" for alias in node.names]
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return found


def _trees() -> dict[str, ast.Module]:
    return {module: ast.parse(path.read_text(), str(path)) for module, path in MODULES.items()}


TREES = _trees()


def import_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports anywhere in its body}."""
    return {module: {target for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                     for target in _imported(module, node)}
            for module, tree in TREES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when the graph has none (depth-first search)."""
    state: dict[str, str] = {}  # module -> "open" (on the current path) | "done"
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = "done"
        return []

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return []


def test_the_walk_sees_every_kind_of_import():
    graph = import_graph()
    assert "evoharness_rl.envs.base" in graph["evoharness_rl.envs.webshop.adapter"]  # module level
    assert "evoharness_rl.models" in graph["evoharness_rl.engines.tokens"]  # inside a function
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycles():
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_models_imports_nothing_from_sft():
    assert not {m for m in import_graph()["evoharness_rl.models"] if m.startswith("evoharness_rl.sft")}


@pytest.mark.parametrize("lower", ["evoharness_rl.rollout", "evoharness_rl.eval"])
def test_rollout_and_eval_import_nothing_from_grpo(lower):
    """The reward lives below them (evoharness_rl/reward.py): lower layers never reach up into the trainer."""
    graph = import_graph()
    found = {f"{module} -> {target}" for module, targets in graph.items()
             if module == lower or module.startswith(lower + ".")
             for target in targets if target.startswith("evoharness_rl.grpo")}
    assert not found, "lower layer imports the trainer: " + ", ".join(sorted(found))


def _env_names() -> list[str]:
    from evoharness_rl.envs import _REGISTRY

    return [name for name in _REGISTRY if (ROOT / "envs" / name).is_dir()]  # the project's own environments


def _lookups_by_name(module: str, tree: ast.Module) -> list[str]:
    """Places in `module` that find an environment's code other than through the registry."""
    own_env = module.split(".")[2] if module.startswith("evoharness_rl.envs.") else None
    names = set(_env_names())
    found = []
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):  # importlib.import_module(...), __import__(...)
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                found.append(f"{where} imports a module by a computed name")
        if isinstance(node, ast.Compare):  # env.name == "alfworld", name in ("alfworld", "webshop")
            for constant in ast.walk(node):
                if isinstance(constant, ast.Constant) and constant.value in names and constant.value != own_env:
                    found.append(f"{where} compares with the environment name {constant.value!r}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):  # another package reaching into an environment's folder
            for target in _imported(module, node):
                parts = target.split(".")
                if len(parts) > 2 and parts[:2] == ["evoharness_rl", "envs"] and parts[2] in names \
                        and parts[2] != own_env:
                    found.append(f"{where} imports {target}")
    return found


def test_every_environment_lookup_goes_through_the_registry():
    found = [place for module, tree in TREES.items() if module != REGISTRY for place in _lookups_by_name(module, tree)]
    assert not found, "environment looked up outside envs/__init__.py:\n" + "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("if cfg.env.name == 'webshop':\n    pass\n", "compares with the environment name 'webshop'"),
    ("import importlib\nimportlib.import_module(f'evoharness_rl.envs.{name}')\n", "imports a module by a computed name"),
    ("from evoharness_rl.envs.alfworld.prepare import prepare\n", "imports evoharness_rl.envs.alfworld.prepare"),
])
def test_the_registry_check_finds_lookups_by_name(source, expected):
    (place,) = _lookups_by_name("evoharness_rl.cli", ast.parse(source))
    assert place.endswith(expected)
