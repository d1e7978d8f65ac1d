"""Find bare vocabulary strings in Python source: a via, status, role, kind or audit action spelled as a
string literal where the code should name the enum member (core.vocabulary, the models' Status enums)."""
from __future__ import annotations

import ast
from dataclasses import dataclass

# Which words a name stands for: a keyword argument, a parameter, a dict key, an assigned name or an
# attribute compared with ==/!=/in (`via=`, `status__in=`, `{"via": ...}`, `VIA = `, `x.status == `).
CATEGORIES = ("via", "action", "status", "role", "kind")


@dataclass(frozen=True)
class Bare:
    line: int
    category: str
    word: str


def _category(name: str | None) -> str | None:
    if not name:
        return None
    name = name.lower().split("__")[0]
    for category in CATEGORIES:
        if name == category or name.endswith("_" + category):
            return category
    return None


def _strings(node) -> list[tuple[int, str]]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(node.lineno, node.value)]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def bare_words(source: str, vocabulary: dict[str, set[str]]) -> list[Bare]:
    """Every literal in `source` that spells a word of `vocabulary` (category -> words) where a name
    of that category takes it."""
    found: list[Bare] = []

    def check(name: str | None, value) -> None:
        category = _category(name)
        if category is None:
            return
        for line, word in _strings(value):
            if word in vocabulary.get(category, ()):
                found.append(Bare(line, category, word))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                check(kw.arg, kw.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
                check(arg.arg, default)
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is not None:
                    check(arg.arg, default)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                check(_name(key) if isinstance(key, ast.Constant) else None, value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                check(_name(target), node.value)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for a, b in zip(operands, operands[1:]):
                check(_name(a), b)
                check(_name(b), a)
    return sorted(set(found), key=lambda b: (b.line, b.word))
