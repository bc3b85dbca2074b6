"""The layers import only downward (ARCHITECTURE.md): every `sparkwave` import, at module level or
inside a function, goes to the module's own package or to one of a lower layer."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sparkwave"

LAYER = {"core": 0, "connectors": 1, "storage": 1, "stream": 2, "meta": 3, "frontend": 4, "server": 5,
         "devtools": 5, "cli": 6, "__init__": 7, "__main__": 7}


def package(module: str) -> str:
    """`sparkwave.meta.jobs` -> `meta`; `sparkwave` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sparkwave"):
            names = [node.module] if node.module != "sparkwave" else [f"sparkwave.{a.name}" for a in node.names]
            out += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "sparkwave"]
    return out


def test_every_import_goes_to_the_same_package_or_a_lower_layer():
    wrong = []
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 40, "the source tree was not found"
    for path in files:
        rel = path.relative_to(SRC)
        own = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        assert own in LAYER, f"{rel}: package {own!r} has no layer in ARCHITECTURE.md / this test"
        for line, target in imports(path):
            theirs = package(target)
            assert theirs in LAYER, f"{rel}:{line}: import of {target} from an unknown package"
            if theirs != own and LAYER[theirs] >= LAYER[own]:
                wrong.append(f"{rel}:{line} ({own}, layer {LAYER[own]}) imports {target} "
                             f"({theirs}, layer {LAYER[theirs]})")
    assert not wrong, "imports that go up or sideways:\n" + "\n".join(wrong)
