"""The package's shape: no import cycle, lower layers never import upward, one short loop.

The import graph is read from the source (``ast``), so the test sees every import the
code makes, including those inside functions, except imports only for type checkers
(``if TYPE_CHECKING:``), which never run.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import coplay
from coplay.train.config import RunConfig
from coplay.train.loop import run_loop

ROOT = Path(coplay.__file__).parent

UPPER = ("coplay.train", "coplay.population", "coplay.sft", "coplay.cli")
"""The training stack and its drivers (population play, warm starts, the CLI), above
everything else."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports(path: Path, known: set[str]) -> set[str]:
    """The coplay modules ``path`` imports."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("coplay")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("coplay"):
            # ``from pkg import submodule`` needs the submodule; any other name, the
            # module (or package ``__init__``) that defines it.
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out |= subs
            if len(subs) < len(node.names):
                out.add(node.module)
    return out & known


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(path, known) - {name} for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from coplay.train.loop import Run\n"
        "def f():\n    from coplay.rollout import source\n"
    )
    known = {"coplay.train.loop", "coplay.rollout", "coplay.rollout.source"}
    assert imports(src, known) == {"coplay.rollout.source"}


def test_no_import_cycle_in_the_package():
    assert cycles(graph()) == []


def test_lower_layers_never_import_the_training_stack():
    upward = {
        (mod, dep)
        for mod, deps in graph().items()
        if mod != "coplay" and not mod.startswith(UPPER)  # the root re-exports the API
        for dep in deps
        if dep.startswith(UPPER)
    }
    assert upward == set()


def test_the_loop_fits_on_one_screen():
    lines = inspect.getsource(run_loop).splitlines()
    assert len(lines) <= 60


def test_run_config_keeps_only_validators_no_section_can_express():
    # Five rules cross sections (the model's mode for choice-only parts; the group
    # size a group-baseline estimator needs; a backend Ray workers can run; room in a
    # private Ray for the rollout workers; a learning-rate warm-up shorter than the
    # run), the check
    # of renamed keys and the import of the plugins (which must come before any
    # section); every other combination is a nested optional section.
    validators = set(RunConfig.__pydantic_decorators__.model_validators)
    assert validators == {
        "_import_plugins",
        "_renamed",
        "_choice_parts_have_choices",
        "_groups_exist",
        "_workers_can_ship_the_backend",
        "_workers_fit_the_local_ray",
        "_warmup_within_run",
    }
