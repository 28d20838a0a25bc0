"""The layers: padloss/ (the contract, the engine, the tools) never imports a backend;
it reaches backends only through the dispatcher's registry and the Backend hooks."""
from __future__ import annotations

import ast
from pathlib import Path

import padloss

ROOT = Path(padloss.__file__).resolve().parent.parent
BACKEND_PACKAGES = {p.name for p in (ROOT / "backends").iterdir() if (p / "__init__.py").is_file()}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in ``path``, wherever it stands (inside
    functions too), and of every literal module name given to importlib.import_module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            found.append((node.lineno, node.args[0].value))
    return found


def test_the_scan_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text("import os\ndef f():\n    from padloss_numba import stream\n"
                      "    importlib.import_module('padloss_torch.pad')\n")
    assert imported_modules(source) == [(1, "os"), (3, "padloss_numba"), (4, "padloss_torch.pad")]


def test_padloss_imports_no_backend():
    assert BACKEND_PACKAGES == {"padloss_numba", "padloss_torch", "padloss_ascend"}
    crossing = [f"{path.relative_to(ROOT)}:{line} imports {module}"
                for path in sorted((ROOT / "padloss").rglob("*.py"))
                for line, module in imported_modules(path)
                if module.split(".")[0] in BACKEND_PACKAGES]
    assert crossing == []


def test_the_registry_names_the_built_in_backends():
    """The one way in: the dispatcher's table, loaded by name."""
    from padloss.dispatch import BUILTIN_BACKENDS

    assert {module for module, _ in BUILTIN_BACKENDS.values()} == BACKEND_PACKAGES


def test_no_function_takes_more_than_ten_parameters():
    """Kernel helpers take operands as small tuples (array, start, step) and the kinds as
    one tuple, not argument walls."""
    walls = []
    for path in sorted((ROOT / "padloss").rglob("*.py")) + sorted((ROOT / "backends").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if count > 10:
                    walls.append(f"{path.relative_to(ROOT)}:{node.lineno} takes {count}")
    assert walls == []
