"""One function per rule: each rule's formula is written in one module, and every other place calls it.

A rule is registered in :data:`RULES` with its home (the module that may spell the formula out) and a
matcher: a function that says whether one AST node spells the formula. The test walks every module of
``apps/`` and ``worker/`` (migrations aside) and fails on a match outside the home; it also fails when
the home no longer holds the formula (a matcher that matches nothing guards nothing). Comments and
docstrings are not code, so explaining a rule in words anywhere stays free.

To add a rule (the discounted price, …): write a matcher, add a :class:`Rule`, and show in
``test_matchers_see_the_formula`` one spelling it catches and one it leaves alone.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("apps", "worker")


def _names(node: ast.AST) -> set[str]:
    """Every variable and attribute name used in ``node``, lower case."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id.lower())
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr.lower())
    return found


def _is_factor(node: ast.AST) -> bool:
    """An expression naming an overcommit factor (``factor``, ``factor_pct``, ``overcommit_pct`` …)."""
    return any("factor" in name or "overcommit" in name for name in _names(node))


def _is_100(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 100


def _products(node: ast.AST) -> list[ast.BinOp]:
    return [sub for sub in ast.walk(node) if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult)]


def _times_100(node: ast.AST) -> bool:
    return any(_is_100(p.left) or _is_100(p.right) for p in _products(node))


def _times_factor(node: ast.AST) -> bool:
    return any(_is_factor(p.left) or _is_factor(p.right) for p in _products(node))


def share_fit_formula(node: ast.AST) -> bool:
    """The compute-share rule ``hard × factor + shared × 100 ≤ WHOLE × factor`` or its solutions for one
    more slice: ``(WHOLE - hard) × factor // 100 - shared`` (shared) and ``… shared × 100 / factor``
    (hard)."""
    if isinstance(node, ast.Compare):
        return _times_100(node) and _times_factor(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.FloorDiv):
        if _is_100(node.right) and _times_factor(node.left):
            return True
        return _is_factor(node.right) and _times_100(node.left)
    return False


def discounted_price_formula(node: ast.AST) -> bool:
    """A price net of a project's discount: arithmetic on a discount (``price × (100 − discount %) / 100``,
    ``price × discount / 100`` …); the one place is ``apps.billing.pricing.discounted_amount``."""
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Sub | ast.Mult | ast.Div):
        return False
    return any("discount" in name for side in (node.left, node.right) for name in _names(side))


@dataclass(frozen=True)
class Rule:
    name: str
    home: str  # the module (path from the repository root) that spells the formula
    matches: Callable[[ast.AST], bool]


RULES = [
    Rule("share fit (DESIGN's core invariant)", "apps/scheduling/engine/share.py", share_fit_formula),
    Rule("discounted price (one quantization)", "apps/billing/pricing.py", discounted_price_formula),
]


def python_files() -> list[Path]:
    files = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "migrations" not in parts and "__pycache__" not in parts:
                files.append(path)
    return files


def places(rule: Rule, paths: list[Path]) -> list[str]:
    """``path:line`` of every node in ``paths`` that spells ``rule``'s formula."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        found += [f"{rel}:{node.lineno}" for node in ast.walk(tree) if rule.matches(node)]
    return found


def _spells(matcher: Callable[[ast.AST], bool], source: str) -> bool:
    return any(matcher(node) for node in ast.walk(ast.parse(source)))


def _assert_sees(matcher: Callable[[ast.AST], bool], caught: list[str], free: list[str]) -> None:
    for source in caught:
        assert _spells(matcher, source), source
    for source in free:
        assert not _spells(matcher, source), source


def test_matchers_see_the_formula():
    caught = [
        "ok = hard * factor + shared * 100 <= WHOLE * factor",
        "if (d.hard_used + c) * factor + d.shared_used * 100 > cap: pass",
        "free = ((WHOLE - d.hard_used) * node.factor) // 100 - d.shared_used",
        "left = WHOLE - hard - math.ceil(shared * 100 / factor_pct)",
        "x = limits.overcommit_pct * hard + 100 * shared > 1000 * limits.overcommit_pct",
    ]
    free = [
        "ok = share_fits(hard, shared, factor)",
        "pct = int(pool.overcommit_factor * 100)",
        "ratio = sum(d.free_compute(factor) * 100 // WHOLE for d in used)",
        "p99 = base_p99 * factor",
        '"""hard * factor + shared * 100 <= WHOLE * factor"""',
    ]
    _assert_sees(share_fit_formula, caught, free)


def test_each_rule_is_written_in_its_home_only():
    paths = python_files()
    for rule in RULES:
        home = ROOT / rule.home
        assert places(rule, [home]), f"{rule.name}: {rule.home} no longer spells the formula"
        elsewhere = places(rule, [p for p in paths if p != home])
        assert elsewhere == [], f"{rule.name} is written outside {rule.home}: call it there instead"


def test_the_discount_matcher_sees_the_formula():
    caught = [
        "net = price * (100 - discount) / 100",
        "amount = (gross * (HUNDRED - Decimal(discount_percent)) / HUNDRED).quantize(Q)",
        "off = card.price * self.discounts[key] / 100",
    ]
    free = [
        "amount = discounted_amount(cu_hours=cu, price=price, discount_percent=discount)",
        "money = option.cu_per_hour * option.price_per_cu_hour",
        '"""price × (100 − discount %) / 100"""',
    ]
    _assert_sees(discounted_price_formula, caught, free)
