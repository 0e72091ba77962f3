"""The package's layers (docs/processes.md, "Layers"): every import in ``jaxmg/``, module-level,
function-local or for the type checker only, runs down the layers or stays inside its own unit;
no two modules import each other, even through others; and only ``jaxmg._context`` reads JAX's
tracers, the meshes in context and JAX's private modules.

The imports are read from the source with ``ast``: nothing is imported or run.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxmg"

#: The layers, top to bottom; each is a tuple of units (a module, or a package with everything in
#: it). A module may import a module of a lower layer, or of its own unit; nothing else.
LAYERS: tuple = (
    ("jaxmg.info", "jaxmg._rank_main"),
    ("jaxmg",),
    ("jaxmg.scipy",),
    ("jaxmg.numpy",),
    ("jaxmg.functional", "jaxmg.lineax", "jaxmg.ops"),
    ("jaxmg.modules",),
    ("jaxmg._dispatch",),
    ("jaxmg._plan",),
    ("jaxmg._context", "jaxmg._routes", "jaxmg._native_check"),
    ("jaxmg.autodiff",),
    ("jaxmg.kernels.local", "jaxmg.kernels.native"),
    ("jaxmg.kernels.families", "jaxmg.kernels.qdwh", "jaxmg.kernels.two_stage", "jaxmg.kernels.cyclic"),
    ("jaxmg.kernels.ffi",),
    (
        "jaxmg.kernels.triangular",
        "jaxmg.kernels.status",
        "jaxmg.kernels.algebra",
        "jaxmg.kernels",
    ),
    ("jaxmg.kernels.varying",),
    ("jaxmg._sharded",),
    ("jaxmg._dense",),
    ("jaxmg._layout",),
    ("jaxmg._checks", "jaxmg._typing", "jaxmg._docstrings", "jaxmg._threads", "jaxmg.launch"),
    ("jaxmg._nvidia", "jaxmg._native"),
)

#: Packages whose unit is their ``__init__`` alone (their modules are units of their own).
FACES = frozenset({"jaxmg", "jaxmg.kernels"})

#: The readers of JAX's tracers, of the meshes in context and of JAX's private modules outside
#: ``jaxmg._context``, each with the reason it is there; a new one fails the test.
OTHER_READERS: dict = {
    ("jaxmg.numpy._results", "jax._src"): "JAX 0.12 defines jax.numpy.linalg's result types (EighResult, "
    "...) in its implementation module only",
    ("jaxmg.kernels.cyclic", "get_abstract_mesh"): "the triangular recursion reads the axis types of the trace "
    "it runs in (Auto inside jax.sharding.auto_axes)",
    ("jaxmg.autodiff._dist", "Tracer"): "the derivative formulas' placement: to be given _context's answer",
    ("jaxmg.autodiff._dist", "get_abstract_mesh"): "the derivative formulas' placement: to be given _context's answer",
}
READ_NAMES = ("Tracer", "get_abstract_mesh", "get_mesh", "get_concrete_mesh")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
KNOWN = set(MODULES) | {"jaxmg._native"}  # the compiled extension (csrc/), below everything


def _resolve(importer: str, node: ast.AST) -> list:
    """The jaxmg modules that one import statement of ``importer`` names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "jaxmg"]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "jaxmg":
        return []
    named = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in KNOWN]
    return named or [source]


def imports_of(name: str) -> list:
    """(line, imported module) for every jaxmg import in module ``name``, wherever it stands."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    return [
        (node.lineno, target)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for target in _resolve(name, node)
    ]


def unit_of(name: str) -> tuple:
    """(layer index, unit) of module ``name``: the longest unit that holds it."""
    found = [
        (len(unit), depth, unit)
        for depth, layer in enumerate(LAYERS)
        for unit in layer
        if name == unit or (unit not in FACES and name.startswith(unit + "."))
    ]
    assert found, f"{name} is in no layer: add it to LAYERS here and to the layers of docs/processes.md"
    _, depth, unit = max(found)
    return depth, unit


def test_every_module_is_in_one_layer():
    for name in KNOWN:
        unit_of(name)
    units = [unit for layer in LAYERS for unit in layer]
    assert len(units) == len(set(units))


def test_no_import_runs_up_the_layers():
    upward = []
    for name in MODULES:
        depth, unit = unit_of(name)
        for line, target in imports_of(name):
            target_depth, target_unit = unit_of(target)
            if target_unit != unit and target_depth <= depth:
                upward.append(
                    f"{MODULES[name].relative_to(ROOT)}:{line} imports {target} "
                    f"(layer {target_depth}, {target_unit}; the importer is in layer {depth}, {unit})"
                )
    assert not upward, "imports that do not run down the layers:\n" + "\n".join(upward)


def test_the_backends_do_not_import_each_other():
    for name in MODULES:
        for backend, other in (
            ("jaxmg.kernels.local", "jaxmg.kernels.native"),
            ("jaxmg.kernels.native", "jaxmg.kernels.local"),
        ):
            if name == backend or name.startswith(backend + "."):
                bad = [t for _, t in imports_of(name) if t == other or t.startswith(other + ".")]
                assert not bad, f"{name} imports {bad}: what both backends need belongs in jaxmg.kernels.ffi"


def test_no_import_cycle():
    graph = {name: {t for _, t in imports_of(name) if t in MODULES and t != name} for name in MODULES}
    state: dict = {}

    def visit(name, path):
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycle = path[path.index(target) :] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def _reads(name: str) -> set:
    """What module ``name`` reads of JAX's tracers, meshes in context and private modules."""
    tree = ast.parse(MODULES[name].read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in READ_NAMES:
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jax._src"):
            found.add("jax._src")
        elif isinstance(node, ast.ImportFrom) and node.module in ("jax.core", "jax.sharding"):
            found |= {a.name for a in node.names if a.name in READ_NAMES}
        elif isinstance(node, ast.Import) and any(a.name.startswith("jax._src") for a in node.names):
            found.add("jax._src")
    return found


def test_only_context_reads_tracers_meshes_in_context_and_private_jax():
    assert {"Tracer", "get_abstract_mesh", "get_mesh", "jax._src"} <= _reads("jaxmg._context")
    others = {(name, what) for name in MODULES if name != "jaxmg._context" for what in _reads(name)}
    unexpected = others - set(OTHER_READERS)
    assert not unexpected, f"read outside jaxmg._context: {sorted(unexpected)}; ask jaxmg._context instead"
    assert not set(OTHER_READERS) - others, "an entry of OTHER_READERS no longer reads: remove it"


def test_only_the_planner_chooses_routes():
    callers = sorted(
        name
        for name in MODULES
        if "_routes.choose(" in MODULES[name].read_text() and name not in ("jaxmg._plan", "jaxmg._routes")
    )
    assert not callers, f"{callers} choose a route themselves; ask jaxmg._plan"
