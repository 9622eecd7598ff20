"""The shape of the code: no import cycle, small modules and functions, no OS I/O in `application`.

The rules (issue 32, "Small modules, one copy"):

- **No import cycle** anywhere in `soong_agent`, not only across layers. The graph counts every
  import: at module top, under ``if TYPE_CHECKING:`` and inside a function (a cycle hidden from
  the interpreter is still one for a reader). Each strongly connected component of two or more
  modules, and each module that imports itself, is reported with its modules.
- **Modules of at most 400 lines.** A data table may be longer when it says so in its first
  line: the module's first line (its docstring's first line) contains the words "data table"
  (``domain/permissions/programs.py``).
- **Functions of at most 80 lines**, every function and method (nested ones too), counted from
  its ``def`` line to the last line of its body (decorators excluded).
- **The application layer does no OS I/O of its own**: no call in `soong_agent/application` of
  ``open()``, an ``os`` / ``os.path`` file call, ``shutil``, ``tempfile`` or ``glob``, nor a file
  method (``read_text``, ``write_text``, ``open``, ``mkdir`` ...) of a `pathlib.Path`; it goes
  through a port. (The import-linter contract "The application layer does no OS I/O of its own"
  in pyproject.toml forbids importing ``fcntl``, ``subprocess``, ``shutil`` and ``socket`` there.)

Each `KNOWN_*` list below holds today's offenders in modules this work does not own yet (the run
code of `application/` and `entrypoints/` being restructured, `adapters/providers/` being
reworked). A list can only shrink: an offender missing from it fails, and so does an entry that
is no longer true ("remove it from the list").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "soong_agent"

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
DATA_TABLE_MARK = "data table"

KNOWN_CYCLES: list[frozenset[str]] = []

IN_REWORK: tuple[str, ...] = ()
"""Folders another change is rewriting right now: their sizes are not checked until it lands
(then this tuple goes, and their offenders join the lists below)."""

KNOWN_LONG_MODULES: set[str] = set()

KNOWN_LONG_FUNCTIONS: set[str] = set()

KNOWN_APPLICATION_IO: set[str] = set()


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path


# --- import cycles -------------------------------------------------------------------------------


def import_cycles(package: str) -> list[frozenset[str]]:
    """The strongly connected components of the package's import graph with two or more
    modules, and the modules that import themselves; every import counts (TYPE_CHECKING and
    function-local ones included)."""
    graph = grimp.build_graph(
        package,
        include_external_packages=False,
        exclude_type_checking_imports=False,
        cache_dir=None,
    )
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    return [c for c in _components(edges) if len(c) > 1 or next(iter(c)) in edges[next(iter(c))]]


def _components(edges: dict[str, list[str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in edges:
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if i < len(targets):
                work.append((node, i + 1))
                target = targets[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(frozenset(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _shown(cycle: frozenset[str]) -> str:
    return "{" + ", ".join(sorted(cycle)) + "}"


def test_no_import_cycle_but_the_known_ones() -> None:
    cycles = import_cycles("soong_agent")
    new = [_shown(c) for c in cycles if c not in KNOWN_CYCLES]
    assert new == [], "import cycles (each a set of modules that import each other):\n" + (
        "\n".join(new)
    )
    gone = [_shown(c) for c in KNOWN_CYCLES if c not in cycles]
    assert gone == [], "these KNOWN_CYCLES no longer exist, remove them from the list:\n" + (
        "\n".join(gone)
    )


def test_the_cycle_check_counts_type_checking_and_local_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker itself: a cycle closed only under TYPE_CHECKING, one closed only inside a
    function and a self-import are each found; a one-way import is not a cycle."""
    pkg = tmp_path / "shape_probe"
    pkg.mkdir()
    files = {
        "__init__.py": "",
        "a.py": "from shape_probe import b\n",
        "b.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from shape_probe import a\n"
        ),
        "c.py": "def f() -> None:\n    from shape_probe import d\n",
        "d.py": "from shape_probe import c\n",
        "e.py": "import shape_probe.e\n",
        "f.py": "from shape_probe import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert sorted(map(_shown, import_cycles("shape_probe"))) == [
        "{shape_probe.a, shape_probe.b}",
        "{shape_probe.c, shape_probe.d}",
        "{shape_probe.e}",
    ]


# --- sizes ---------------------------------------------------------------------------------------


def is_data_table(text: str) -> bool:
    """A module that says in its first line that it is a data table."""
    first = text.split("\n", 1)[0]
    return DATA_TABLE_MARK in first.lower()


def long_modules() -> dict[str, int]:
    found: dict[str, int] = {}
    for name, path in _modules():
        if name.startswith(IN_REWORK):
            continue
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and not is_data_table(text):
            found[name] = lines
    return found


def _functions(
    node: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            qualname = prefix + child.name
            yield qualname, child
            yield from _functions(child, qualname + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, prefix + child.name + ".")
        else:
            yield from _functions(child, prefix)


def function_lines(source: str) -> dict[str, int]:
    """The length of each function of `source` by qualified name, ``def`` line to the end of
    its body (a decorator's lines are not counted)."""
    lengths: dict[str, int] = {}
    for qualname, node in _functions(ast.parse(source)):
        assert node.end_lineno is not None
        lengths[qualname] = max(lengths.get(qualname, 0), node.end_lineno - node.lineno + 1)
    return lengths


def long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for name, path in _modules():
        if name.startswith(IN_REWORK):
            continue
        for qualname, lines in function_lines(path.read_text(encoding="utf-8")).items():
            if lines > MAX_FUNCTION_LINES:
                found[f"{name}::{qualname}"] = lines
    return found


def test_no_module_over_400_lines_but_data_tables() -> None:
    found = long_modules()
    new = {name: n for name, n in found.items() if name not in KNOWN_LONG_MODULES}
    assert new == {}, (
        f"modules over {MAX_MODULE_LINES} lines (split them along their seams; a data table "
        f"says '{DATA_TABLE_MARK}' in its first line): {new}"
    )
    fixed = sorted(KNOWN_LONG_MODULES - set(found))
    assert fixed == [], f"no longer over {MAX_MODULE_LINES} lines, remove it from the list: {fixed}"


def test_no_function_over_80_lines() -> None:
    found = long_functions()
    new = {name: n for name, n in found.items() if name not in KNOWN_LONG_FUNCTIONS}
    assert new == {}, f"functions over {MAX_FUNCTION_LINES} lines: {new}"
    fixed = sorted(KNOWN_LONG_FUNCTIONS - set(found))
    assert fixed == [], (
        f"no longer over {MAX_FUNCTION_LINES} lines, remove it from the list: {fixed}"
    )


def test_the_size_checks_measure_what_they_say() -> None:
    source = (
        "@decorator\n"
        "@other(\n"
        "    1)\n"
        "def top():\n" + "    x = 1\n" * 80 + "class K:\n"
        "    async def method(self):\n"
        "        def inner():\n"
        "            return 1\n"
        "        return inner\n"
    )
    assert function_lines(source) == {"top": 81, "K.method": 4, "K.method.inner": 2}
    assert is_data_table('"""Program option tables, a data table: what ...\n')
    assert not is_data_table('"""Programs.\n\nA data table.\n"""\n')


# --- OS I/O in the application layer -------------------------------------------------------------

OS_FILE_CALLS = frozenset(
    {
        "open", "fdopen", "replace", "rename", "renames", "remove", "unlink", "makedirs",
        "mkdir", "rmdir", "removedirs", "stat", "lstat", "fstat", "listdir", "scandir", "walk",
        "chmod", "chown", "utime", "access", "symlink", "link", "readlink", "truncate",
        "ftruncate", "fsync", "read", "write", "close", "pread", "pwrite",
    }
)  # fmt: skip
OS_PATH_CALLS = frozenset(
    {"exists", "lexists", "isfile", "isdir", "islink", "realpath", "getsize", "getmtime",
     "getctime", "getatime", "samefile"}
)  # fmt: skip
PATH_METHODS = frozenset(
    {
        "open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "rmdir",
        "unlink", "touch", "rename", "replace", "exists", "is_file", "is_dir", "is_symlink",
        "stat", "lstat", "iterdir", "glob", "rglob", "resolve", "chmod", "readlink",
        "symlink_to", "hardlink_to", "samefile",
    }
)  # fmt: skip
PATH_TYPES = frozenset({"pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath"})


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name, for every import of the module (anywhere in it)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".", 1)[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _forbidden_call(dotted: str) -> bool:
    module, _, name = dotted.rpartition(".")
    if dotted in ("open", "io.open", "builtins.open"):
        return True
    if module == "os":
        return name in OS_FILE_CALLS
    if module == "os.path":
        return name in OS_PATH_CALLS
    return module in ("shutil", "tempfile") or dotted in ("glob.glob", "glob.iglob")


class _IoFinder(ast.NodeVisitor):
    """Calls of OS file functions, and file methods on what is visibly a `pathlib.Path`: a
    `Path(...)` call, ``path / "x"`` of one, or a name bound to one (an assignment from one or
    a parameter annotated `Path`) in the same function or at module level."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.scopes: list[set[str]] = [set()]
        self.found: list[str] = []

    def _is_path_type(self, node: ast.expr | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._is_path_type(node.left) or self._is_path_type(node.right)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.split("|")[0].strip() in ("Path", "pathlib.Path")
        return _dotted(node, self.names) in PATH_TYPES

    def _is_path(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Call):
            return _dotted(node.func, self.names) in PATH_TYPES
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._is_path(node.left)
        if isinstance(node, ast.Name):
            return any(node.id in scope for scope in self.scopes)
        return False

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        self.scopes.append({a.arg for a in args if self._is_path_type(a.annotation)})
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._is_path(node.value):
            self.scopes[-1].update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and (
            self._is_path_type(node.annotation) or (node.value and self._is_path(node.value))
        ):
            self.scopes[-1].add(node.target.id)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        dotted = _dotted(node.func, self.names)
        if dotted is not None and _forbidden_call(dotted):
            self.found.append(dotted)
        elif (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in PATH_METHODS
            and self._is_path(node.func.value)
        ):
            self.found.append(f"Path.{node.func.attr}")
        self.generic_visit(node)


def os_io_calls(source: str) -> list[str]:
    """The OS file calls of `source` (``os.replace``, ``open``, ``Path.write_text`` ...)."""
    tree = ast.parse(source)
    finder = _IoFinder(_imported_names(tree))
    finder.visit(tree)
    return finder.found


def application_io() -> dict[str, int]:
    found: dict[str, int] = {}
    for name, path in _modules():
        if not name.startswith("application/"):
            continue
        for call in os_io_calls(path.read_text(encoding="utf-8")):
            key = f"{name}::{call}"
            found[key] = found.get(key, 0) + 1
    return found


def test_the_application_layer_does_no_os_io() -> None:
    found = application_io()
    new = sorted(key for key in found if key not in KNOWN_APPLICATION_IO)
    assert new == [], f"OS I/O in the application layer (go through a port instead): {new}"
    fixed = sorted(KNOWN_APPLICATION_IO - set(found))
    assert fixed == [], f"no longer doing OS I/O, remove it from the list: {fixed}"


def test_the_io_check_finds_each_kind_of_call() -> None:
    source = (
        "import os, shutil\n"
        "from os import replace as swap\n"
        "from pathlib import Path\n"
        "def f(p: Path, q: str, r: 'Path | None') -> None:\n"
        "    open(q)\n"
        "    os.makedirs(q)\n"
        "    os.path.realpath(q)\n"
        "    swap(q, q)\n"
        "    shutil.which('bash')\n"
        "    p.write_text('x')\n"
        "    (p / 'a').read_text()\n"
        "    Path(q).open()\n"
        "    here = Path(q) / 'b'\n"
        "    here.unlink()\n"
        "    r.exists()\n"
    )
    assert os_io_calls(source) == [
        "open",
        "os.makedirs",
        "os.path.realpath",
        "os.replace",
        "shutil.which",
        "Path.write_text",
        "Path.read_text",
        "Path.open",
        "Path.unlink",
        "Path.exists",
    ]
    # a port's methods of the same names and string work are not OS I/O
    clean = (
        "import dataclasses, os\n"
        "async def g(ctx, text: str) -> None:\n"
        "    await ctx.fs.write_text('a', 'b')\n"
        "    await ctx.fs.read_bytes('a')\n"
        "    text.replace('a', 'b')\n"
        "    os.environ.get('X')\n"
        "    dataclasses.replace(ctx)\n"
    )
    assert os_io_calls(clean) == []
