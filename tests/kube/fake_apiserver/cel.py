"""The subset of CEL the fake compiles and evaluates for DRA device selectors."""

from __future__ import annotations

import json
import re

# -- a CEL subset for DRA selectors ------------------------------------------------------------------
# DRA device selectors are CEL expressions over ``device`` (driver, attributes, capacity):
# https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/ and
# staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go. The fake understands only
#   device.driver | device.attributes["<domain>"].<name> | device.attributes["<domain>"]["<name>"]
#   == != in, string / int / bool literals and lists of them, && || ! and parentheses
# and refuses anything else with the 422 a compilation failure gets (a real server would accept more
# CEL; the fake never guesses what it cannot evaluate).
_CEL_TOKEN = re.compile(
    r"\s*(?:(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')|(?P<num>-?[0-9]+)(?![0-9A-Za-z_.])"
    r"|(?P<op>==|!=|&&|\|\||[()\[\].,!])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)


class CelError(Exception):
    """A compilation failure (the fake's parser) or a runtime error (e.g. ``no such key``)."""


class _Version(str):
    """A ``version`` attribute: a semver value, never equal to a plain string in CEL."""


def _cel_tokens(text: str) -> list[tuple[str, object, int]]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _CEL_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            col = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise CelError(
                f"ERROR: <input>:1:{col + 1}: Syntax error: token recognition error at: '{text[col]}' "
                "(or an operator the fake API server's CEL subset does not implement)"
            )
        kind = m.lastgroup
        raw = m.group(kind)
        if kind == "str":
            value: object = json.loads('"' + raw[1:-1].replace('"', '\\"').replace("\\'", "'") + '"')
        elif kind == "num":
            value = int(raw)
        else:
            value = raw
        tokens.append((kind, value, m.start(kind)))
        pos = m.end()
    return tokens


class _CelParser:
    """Recursive descent over the tokens → a small AST of tuples."""

    def __init__(self, text: str):
        self.text, self.tokens, self.i = text, _cel_tokens(text), 0

    def fail(self, what: str):
        col = self.tokens[self.i][2] + 1 if self.i < len(self.tokens) else len(self.text) + 1
        raise CelError(f"ERROR: <input>:1:{col}: Syntax error: {what}")

    def peek(self, value=None):
        if self.i < len(self.tokens):
            kind, tok, _ = self.tokens[self.i]
            if value is None or (kind in ("op", "id") and tok == value):
                return self.tokens[self.i]
        return None

    def take(self, value):
        if not self.peek(value):
            self.fail(f"expected '{value}'")
        self.i += 1

    def parse(self):
        if not self.tokens:
            raise CelError("ERROR: <input>:1:1: Syntax error: mismatched input '<EOF>'")
        node = self.expr()
        if self.i != len(self.tokens):
            self.fail(f"unexpected '{self.tokens[self.i][1]}' (not in the fake API server's CEL subset)")
        if node[0] not in ("or", "and", "not", "cmp", "lit") or (
            node[0] == "lit" and not isinstance(node[1], bool)
        ):
            raise CelError("ERROR: <input>:1:1: expression must evaluate to a bool")
        return node

    def expr(self):
        node = self.conj()
        while self.peek("||"):
            self.i += 1
            node = ("or", node, self.conj())
        return node

    def conj(self):
        node = self.unary()
        while self.peek("&&"):
            self.i += 1
            node = ("and", node, self.unary())
        return node

    def unary(self):
        if self.peek("!"):
            self.i += 1
            return ("not", self.unary())
        left = self.primary()
        for op in ("==", "!=", "in"):
            if self.peek(op):
                self.i += 1
                return ("cmp", op, left, self.primary())
        return left

    def primary(self):
        tok = self.peek()
        if tok is None:
            self.fail("mismatched input '<EOF>'")
        kind, value, _ = tok
        if kind in ("str", "num"):
            self.i += 1
            return ("lit", value)
        if kind == "id" and value in ("true", "false"):
            self.i += 1
            return ("lit", value == "true")
        if value == "(":
            self.i += 1
            node = self.expr()
            self.take(")")
            return node
        if value == "[":
            self.i += 1
            items = []
            while not self.peek("]"):
                item = self.primary()
                if item[0] != "lit":
                    self.fail("list items must be literals in the fake API server's CEL subset")
                items.append(item[1])
                if not self.peek("]"):
                    self.take(",")
            self.take("]")
            return ("lit", items)
        if kind == "id" and value == "device":
            self.i += 1
            path: list[str] = []
            while True:
                if self.peek("."):
                    self.i += 1
                    nxt = self.peek()
                    if nxt is None or nxt[0] != "id":
                        self.fail("expected a field name after '.'")
                    self.i += 1
                    if self.peek("("):
                        self.fail(f"function '{nxt[1]}' is not in the fake API server's CEL subset")
                    path.append(str(nxt[1]))
                elif self.peek("["):
                    self.i += 1
                    key = self.peek()
                    if key is None or key[0] != "str":
                        self.fail("expected a string index")
                    self.i += 1
                    self.take("]")
                    path.append(str(key[1]))
                else:
                    break
            if (
                not path
                or path[0] not in ("driver", "attributes")
                or (path[0] == "driver" and len(path) != 1)
                or (path[0] == "attributes" and len(path) != 3)
            ):
                self.fail(
                    'only device.driver and device.attributes["<domain>"].<name> are in the fake API '
                    "server's CEL subset"
                )
            return ("path", tuple(path))
        if kind == "id":
            if self.i + 1 < len(self.tokens) and self.tokens[self.i + 1][1] == "(":
                self.fail(f"function '{value}' is not in the fake API server's CEL subset")
            col = tok[2] + 1
            raise CelError(f"ERROR: <input>:1:{col}: undeclared reference to '{value}' (in container '')")
        self.fail(f"unexpected '{value}'")


def cel_compile(expression: str):
    """Parse a selector expression of the subset; CelError when it is not one."""
    return _CelParser(expression).parse()


def device_env(driver: str, device: dict) -> dict:
    """The ``device`` variable: attributes grouped by domain — an unqualified name belongs to the
    driver's domain, ``domain/name`` to that domain (the DRA CEL environment)."""
    domains: dict[str, dict] = {}
    for key, value in (device.get("attributes") or {}).items():
        domain, _, name = key.rpartition("/")
        domain = domain or driver
        if isinstance(value, dict) and len(value) == 1:
            ((vtype, v),) = value.items()
            v = _Version(v) if vtype == "version" else v
        else:
            v = value
        domains.setdefault(domain, {})[name] = v
    return {"driver": driver, "attributes": domains}


def cel_evaluate(node, env: dict):
    """Evaluate a compiled expression; CelError on a runtime error (a missing attribute is ``no such
    key``, as CEL map access; a missing domain is an empty map). ``&&`` / ``||`` absorb an error
    when the other side decides (CEL's commutative logic)."""
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "path":
        path = node[1]
        if path[0] == "driver":
            return env["driver"]
        attrs = env["attributes"].get(path[1], {})
        if path[2] not in attrs:
            raise CelError(f"no such key: {path[2]}")
        return attrs[path[2]]
    if op == "not":
        value = cel_evaluate(node[1], env)
        if not isinstance(value, bool):
            raise CelError("no such overload: !_")
        return not value
    if op in ("and", "or"):
        results = []
        for side in node[1:]:
            try:
                results.append(cel_evaluate(side, env))
            except CelError as e:
                results.append(e)
        decisive = op == "or"  # True decides ||, False decides &&
        if any(r is decisive for r in results):
            return decisive
        for r in results:
            if isinstance(r, CelError):
                raise r
            if not isinstance(r, bool):
                raise CelError(f"no such overload: _{'||' if op == 'or' else '&&'}_")
        return not decisive
    _, cmp, left, right = node
    a, b = cel_evaluate(left, env), cel_evaluate(right, env)

    def same(x, y) -> bool:  # heterogeneous equality: values of different types are never equal
        if isinstance(x, bool) != isinstance(y, bool) or isinstance(x, _Version) != isinstance(y, _Version):
            return False
        return type(x) is type(y) and x == y if not isinstance(x, str) else isinstance(y, str) and x == y

    if cmp == "in":
        if not isinstance(b, list):
            raise CelError("no such overload: @in")
        return any(same(a, item) for item in b)
    return same(a, b) if cmp == "==" else not same(a, b)
