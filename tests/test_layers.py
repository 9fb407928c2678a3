"""Layers point one way: commands -> injector / run / report -> rewriter ->
base.  Every import of Ferry's own modules, at the top of a file or inside a
function, is resolved and checked against what its layer may use."""
import ast

from conftest import ROOT

# package (as setup.cfg's package_dir names it) -> the packages it may import
ALLOWED = {
    "ferry.base": {"ferry.base"},
    "ferry.rewriter": {"ferry.base", "ferry.rewriter"},
    "ferry.profiles": {"ferry.base", "ferry.profiles"},
    "ferry.injector": {"ferry.base", "ferry.rewriter", "ferry.profiles", "ferry.injector"},
}
FOLDERS = {"ferry.base": "base", "ferry.rewriter": "rewriter", "ferry.profiles": "profiles",
           "ferry.injector": "injector"}


def _imports(package, path):
    """The absolute names of Ferry's modules that `path` (a module of `package`) imports."""
    tree = ast.parse(path.read_text(), str(path))
    parts = package.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[:len(parts) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names] if not node.module else [target]
            yield from (n for n in names if n.startswith("ferry"))
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("ferry"))


def _layer(name):
    """The package of module `name`: ferry.rewriter.cache -> ferry.rewriter, ferry.procfile -> ferry."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] in {p.split(".")[1] for p in FOLDERS} else "ferry"


def test_each_layer_imports_only_the_layers_below_it():
    wrong = []
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            for name in _imports(package, path):
                if _layer(name) not in ALLOWED[package]:
                    wrong.append(f"{folder}/{path.name} imports {name}")
    assert wrong == []


def test_the_checker_sees_an_upward_import(tmp_path):
    """A module of the rewriter that imports the run code is caught, relative or not."""
    module = tmp_path / "bad.py"
    module.write_text("from .. import runner\ndef f():\n    from ..injector.launch import x\n"
                      "import ferry.procfile\n")
    found = {_layer(n) for n in _imports("ferry.rewriter", module)}
    assert found == {"ferry", "ferry.injector"}
