"""Imports flow one way: gguf_loader <- kernels_numba <- pocketcli engine/models <- server/commands <- tui.

The graph is read from the source with `ast` (nothing is imported), and every import counts: module level,
inside a function (a lazy import is still a dependency) and under `if TYPE_CHECKING`. Layers, lowest first:

  0    gguf_loader                 numpy only
  1    kernels_numba               ops (reference, cpu/, cuda/) and get_ops()
  2.0  pocketcli's own base        the package, every top-level module but cli.py (errors, paths, config,
                                   sampling_params, sampling_defaults, device, registry, model_source, downloads,
                                   compile progress, version_report) and tokenizer/
  2.1  pocketcli.models            one file per architecture
  2.2  pocketcli.engine            sequence, scheduler, runner, sampler, llm_engine, speculative/
  2.3  pocketcli.parallel          tensor parallelism, applied from outside the engine and the model
  2.4  pocketcli.engine_factory    EngineConfig -> engine, with the ranks of --tp attached (joins 2.2 and 2.3)
  3    pocketcli.server, .commands, .chat, .cli   the front ends
  4    tui                         the Textual app, launched by `pocket chat` through a late-bound hook

A module may import its own layer or a lower one. Above kernels_numba, a backend's internals
(kernels_numba.cpu.*, kernels_numba.cuda.*) are reached only through kernels_numba's public names and get_ops().
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gguf_loader", "kernels_numba", "pocketcli", "tui")
FRONT_ENDS = ("server", "commands", "chat", "cli")
POCKETCLI_SUBLAYERS = {"models": 2.1, "engine": 2.2, "parallel": 2.3, "engine_factory": 2.4}
BACKEND_INTERNALS = ("kernels_numba.cpu", "kernels_numba.cuda")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of everything a file imports; `from a import b` gives a.b (b may be a module)."""
    module, is_package = module_name(path), path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            found += [(node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base) for alias in node.names]
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if not level:
        return name
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def layer(name: str) -> float | None:
    """The layer of a dotted module name (or of a name inside a module); None outside our packages."""
    parts = name.split(".")
    top = {"gguf_loader": 0, "kernels_numba": 1, "tui": 4}.get(parts[0])
    if top is not None or parts[0] != "pocketcli":
        return top
    sub = parts[1] if len(parts) > 1 else ""
    if sub in FRONT_ENDS:
        return 3
    return POCKETCLI_SUBLAYERS.get(sub, 2.0)


def unit(name: str) -> str:
    """The subpackage or top-level module a name belongs to (pocketcli.engine, pocketcli.errors), else its
    package (kernels_numba.get_ops -> kernels_numba)."""
    parts = name.split(".")
    if len(parts) > 1 and ((ROOT / parts[0] / parts[1]).is_dir() or (ROOT / parts[0] / f"{parts[1]}.py").is_file()):
        return ".".join(parts[:2])
    return parts[0]


def source_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def import_edges() -> list[tuple[str, int, str, str]]:
    """(file, line, importing module, imported name) for every import of one of our packages."""
    edges = []
    for path in source_files():
        module = module_name(path)
        for line, name in imported_names(path):
            if name.split(".")[0] in PACKAGES:
                edges.append((str(path.relative_to(ROOT)), line, module, name))
    return edges


def back_edges(edges) -> list[tuple[str, int, str]]:
    return [(file, line, name) for file, line, module, name in edges if layer(name) > layer(module)]


def backend_internal_imports(edges) -> list[tuple[str, int, str]]:
    return [(file, line, name) for file, line, module, name in edges
            if layer(module) >= 2 and name.startswith(tuple(b + "." for b in BACKEND_INTERNALS))]


def unit_cycles(edges) -> list[list[str]]:
    """Cycles in the graph of subpackages (pocketcli.engine -> pocketcli.parallel -> pocketcli.engine)."""
    graph: dict[str, set[str]] = {}
    for _, _, module, name in edges:
        a, b = unit(module), unit(name)
        if a != b:
            graph.setdefault(a, set()).add(b)
    cycles, done = [], set()

    def visit(node, path):
        for target in sorted(graph.get(node, ())):
            if target in path:
                cycles.append(path[path.index(target):] + [target])
            elif target not in done:
                visit(target, path + [target])
        done.add(node)

    for start in sorted(graph):
        if start not in done:
            visit(start, [start])
    return cycles


def cross_backend_imports(edges) -> list[tuple[str, int, str]]:
    """A backend importing another one's internals (cuda -> cpu, cpu -> cuda) or the reference importing a backend:
    what two backends share lives beside them in kernels_numba (quant_codes, kv_type, reference_*)."""
    return [(file, line, name) for file, line, module, name in edges
            for own, others in _BACKEND_BOUNDS.items()
            if module.startswith(own) and name.startswith(others)]  # reference: reference_*.py too


_BACKEND_BOUNDS = {"kernels_numba.cuda": ("kernels_numba.cpu",), "kernels_numba.cpu": ("kernels_numba.cuda",),
                   "kernels_numba.reference": ("kernels_numba.cpu", "kernels_numba.cuda")}


def _listing(rows) -> str:
    return "\n".join(f"  {file}:{line}  imports {name}" for file, line, name in rows)


def test_no_import_goes_against_the_layers():
    bad = back_edges(import_edges())
    assert not bad, "imports from a higher layer (see this file's docstring):\n" + _listing(bad)


def test_backends_are_reached_through_the_public_api():
    bad = backend_internal_imports(import_edges())
    assert not bad, ("kernels_numba.cpu/cuda internals imported above kernels_numba (use kernels_numba's public "
                     "names or get_ops):\n" + _listing(bad))


def test_no_backend_imports_another_backend():
    bad = cross_backend_imports(import_edges())
    assert not bad, "a backend imports another backend (move what they share into kernels_numba):\n" + _listing(bad)


def test_no_cycle_between_subpackages():
    cycles = unit_cycles(import_edges())
    layer2 = [c for c in cycles if all(layer(u) is not None and 2 <= layer(u) < 3 for u in c)]
    assert not layer2, "cycles between pocketcli's engine/models/parallel:\n" + "\n".join(
        "  " + " -> ".join(c) for c in layer2)


def test_the_back_edges_issue_27_named_stay_gone():
    edges = import_edges()
    named = {  # file -> the imports it must not have
        "pocketcli/engine/llm_engine.py": ("kernels_numba.cpu", "pocketcli.parallel"),
        "pocketcli/engine/sampler.py": ("kernels_numba.cpu",),
        "pocketcli/engine/warm_up.py": ("kernels_numba.cpu",),
        "pocketcli/commands/chat.py": ("tui",),
        "pocketcli/errors.py": ("pocketcli.engine",),
    }
    bad = [(file, line, name) for file, line, _, name in edges
           if any(name == p or name.startswith(p + ".") for p in named.get(file, ()))]
    assert not bad, _listing(bad)


def test_the_checks_see_a_back_edge_and_a_cycle():
    """The walker itself: a lazy import inside a function counts, and so does a relative one."""
    edges = [("pocketcli/errors.py", 3, "pocketcli.errors", "pocketcli.engine.llm_engine.LLMEngine"),
             ("pocketcli/engine/llm_engine.py", 9, "pocketcli.engine.llm_engine", "pocketcli.parallel.RankGroup"),
             ("pocketcli/parallel/runner.py", 7, "pocketcli.parallel.runner", "pocketcli.engine.model_runner"),
             ("pocketcli/engine/sampler.py", 14, "pocketcli.engine.sampler", "kernels_numba.cpu.softmax_draw.f")]
    assert [row[:2] for row in back_edges(edges)] == [("pocketcli/errors.py", 3),
                                                        ("pocketcli/engine/llm_engine.py", 9)]
    assert backend_internal_imports(edges) == [edges[3][:2] + (edges[3][3],)]
    assert ["pocketcli.engine", "pocketcli.parallel", "pocketcli.engine"] in unit_cycles(edges)
    backends = [("kernels_numba/cuda/matvec.py", 5, "kernels_numba.cuda.matvec", "kernels_numba.cpu.matvec.x"),
                ("kernels_numba/cuda/matvec.py", 6, "kernels_numba.cuda.matvec", "kernels_numba.quant_codes.F32"),
                ("kernels_numba/reference_moe.py", 7, "kernels_numba.reference_moe", "kernels_numba.cpu.moe")]
    assert [row[:2] for row in cross_backend_imports(backends)] == [("kernels_numba/cuda/matvec.py", 5),
                                                                     ("kernels_numba/reference_moe.py", 7)]
    assert _absolute("pocketcli.engine.speculative", True, 2, "models") == "pocketcli.engine.models"
    assert _absolute("pocketcli.engine.sampler", False, 2, "config") == "pocketcli.config"
    source = "def f():\n    from ..parallel import rank_group\n"
    tree_names = [(n.lineno, _absolute("pocketcli.engine.llm_engine", False, n.level, n.module))
                  for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)]
    assert tree_names == [(2, "pocketcli.parallel")]


def _defines(path: Path, name: str) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def test_kernels_numba_public_names_exist_in_their_modules():
    """Read, not imported: the CUDA name is checked without numba-cuda or a GPU."""
    import kernels_numba

    for public, (module, attribute) in kernels_numba._PUBLIC_NAMES.items():
        path = ROOT / (module.replace(".", "/") + ".py")
        assert _defines(path, attribute), f"kernels_numba.{public}: {module} defines no {attribute}"


def test_pocket_chat_names_a_function_of_the_tui():
    from pocketcli.commands.chat import CHAT_APP

    module_name, _, function_name = CHAT_APP.partition(":")
    assert _defines(ROOT / module_name / "__init__.py", function_name)
    assert layer(module_name) == 4
