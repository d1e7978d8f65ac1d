"""The layers hold at run time too: no module of a lower layer holds a function of a higher one, put there
at start-up (an AppConfig.ready filling a registry) so that the lower layer calls up without importing it.
import-linter sees imports only; this looks at what the modules hold once every app is ready. A higher
layer hears from a lower one through signals (the lower one says what happened, the higher receives) or
is called from above; a lower layer needing an answer gets it passed in by its caller.

Each rule has its red case: a registry filled on purpose with a higher layer's function."""
from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
import types
from pathlib import Path

from django.dispatch import Signal

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("core", "provenance", "repairs", "compensation", "kintsugi_site")  # lowest first, as .importlinter


def _layer(module_name: str | None) -> int | None:
    top = (module_name or "").split(".")[0]
    return LAYERS.index(top) if top in LAYERS else None


def _callables(value, depth: int = 3):
    """The functions `value` holds: itself, a dict's values, a collection's items, the attributes of an
    object (a registry object), and so on `depth` levels down. Signals are
    not looked into: a receiver of a lower layer's signal is how a higher layer is meant to hear."""
    if depth < 0 or isinstance(value, (Signal, type, types.ModuleType, str, bytes, int, float)):
        return
    if isinstance(value, functools.partial):
        yield from _callables(value.func, depth)
    elif isinstance(value, types.MethodType):
        yield value.__func__
    elif isinstance(value, types.FunctionType):
        yield value
    elif isinstance(value, dict):
        for item in list(value.values()):
            yield from _callables(item, depth - 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in list(value):
            yield from _callables(item, depth - 1)
    elif hasattr(value, "__dict__") and not callable(value):
        for item in list(vars(value).values()):
            yield from _callables(item, depth - 1)


def calls_up(modules) -> list[str]:
    """Each module-level name of a layer's module that holds a function of a higher layer."""
    found = []
    for module in modules:
        own = _layer(module.__name__)
        if own is None:
            continue
        for name, value in list(vars(module).items()):
            if isinstance(value, types.ModuleType):
                continue
            for fn in _callables(value):
                theirs = _layer(getattr(fn, "__module__", None))
                if theirs is not None and theirs > own:
                    found.append(f"{module.__name__}.{name} holds {fn.__module__}.{fn.__qualname__}")
    return sorted(set(found))


def _every_module():
    for package in LAYERS[:-1]:  # nothing is above the top layer
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            if ".migrations" not in info.name and ".settings" not in info.name:
                yield importlib.import_module(info.name)


def test_no_lower_layer_holds_a_higher_layers_function_once_the_apps_are_ready():
    assert calls_up(list(_every_module())) == []


def test_a_registry_filled_with_a_higher_layers_function_is_caught():
    from compensation.drafting import drafts
    from repairs.signals import repair_planned

    class Registry:  # what a registry filled at start-up looks like from inside
        def __init__(self):
            self.functions = {}

    lower = types.ModuleType("repairs.calls_up")
    lower.compensation = Registry()
    lower.compensation.functions["draft_repair"] = drafts.draft_repair
    lower.HANDLERS = {"what_if": functools.partial(drafts.draft_planned, incident=None)}
    lower.announced = repair_planned  # a signal compensation receives: allowed
    lower.same_layer = {"walk": _every_module}  # not a layer module's function: not looked at
    assert calls_up([lower]) == [
        "repairs.calls_up.HANDLERS holds compensation.drafting.drafts.draft_planned",
        "repairs.calls_up.compensation holds compensation.drafting.drafts.draft_repair",
    ]


def _provides(root: Path) -> list[str]:
    """Where a module declares or fills a provided-functions registry (`Provided(...)`, `x.provide(...)`)."""
    found = []
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                called = node.func if isinstance(node, ast.Call) else None
                name = (called.attr if isinstance(called, ast.Attribute) else
                        called.id if isinstance(called, ast.Name) else None)
                if name in ("provide", "Provided") or (isinstance(node, ast.ClassDef) and node.name == "Provided"):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_module_declares_or_fills_a_registry_of_calls_up(tmp_path):
    assert _provides(ROOT) == []
    (tmp_path / "compensation").mkdir()
    (tmp_path / "compensation" / "apps.py").write_text(
        "def ready():\n    from repairs import downstream\n    downstream.compensation.provide(draft_repair=None)\n")
    assert _provides(tmp_path) == ["compensation/apps.py:3"]
