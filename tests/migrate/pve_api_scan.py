"""Find every Proxmox VE API call site in Python code by parsing it (AST), not by file name.

A call site is found wherever the code reaches the PVE API:

- a proxmoxer chain: an expression of type ``ProxmoxAPI`` (made by ``ProxmoxAPI(...)``,
  annotated as one, or stored in ``self.x``/a variable from one) followed by attribute
  and call segments and ended by ``.get/.post/.put/.delete/.create/.set(...)``:
  ``prox.nodes(n).lxc(v).status.start.post()`` is ``POST /nodes/{x}/lxc/{x}/status/start``;
  ``prox(path)`` and ``getattr(resource, name)`` are segments too;
- a call of a *wrapper*: a function or method whose proxmoxer chain takes its path (and
  maybe its method) from its own parameters (``PveClient.call(method, template, ...)``,
  ``Api.get(path, **params)``). Wrappers are found by the same parse; their callers are
  the call sites, with the path argument resolved there.

Paths are resolved from string literals, f-strings (``{expr}`` becomes a ``{x}`` path
parameter), ``.format``/``.lstrip`` of those, local variables assigned once, module
constants and small module functions that return one. A call site whose path cannot be
resolved is a problem naming ``file:line``. Receivers are typed from annotations,
constructor calls, ``x = a or b``, tuple returns and ``with f() as x``; a call that looks
like a PVE call (``.call("GET", ...)``, ``.get("/...")``) on a receiver of unknown type
is a problem too, so nothing is skipped silently.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROXMOXER = "ProxmoxAPI"
HTTP_METHODS = {"GET", "POST", "PUT", "DELETE"}
_TERMINALS = {
    "get": "GET",
    "post": "POST",
    "put": "PUT",
    "delete": "DELETE",
    "create": "POST",
    "set": "PUT",
}


@dataclass(frozen=True)
class CallSite:
    """One API call in the code: where, METHOD, path template, parameter names."""

    file: str
    line: int
    method: str
    template: str
    params: tuple[str, ...]
    dynamic_params: bool  # a **mapping at the call site: its names are declared elsewhere
    owner: str  # the module whose API_CALLS declares this call (the wrapper's or its own)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Wrapper:
    """A function that calls the API with a path (and maybe method) from its parameters."""

    owner_class: str | None
    name: str
    module: str
    method: str | int  # a fixed METHOD, or the index of the parameter holding it
    path: int  # index of the parameter holding the path (self not counted)
    path_args: int | None  # index of a mapping parameter that fills the template
    forwards_kwargs: bool  # **kwargs of the wrapper become API parameters


@dataclass
class ScanResult:
    calls: list[CallSite] = field(default_factory=list)
    wrappers: list[Wrapper] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    declared: dict[str, list[tuple[str, str, list[str]]]] = field(default_factory=dict)


# ----------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Param:
    """A value that is (a transformation of) the enclosing function's parameter."""

    name: str
    fills_from: str | None = None  # ``.format(**name)``: the mapping that fills it


Resolved = str | Param | None  # a path template, a parameter, or unknown


def _type_name(annotation: ast.expr | None) -> str | None:
    if annotation is None:
        return None
    text = ast.unparse(annotation).replace("Optional[", "").rstrip("]")
    parts = [p.strip() for p in text.split("|") if p.strip() not in ("None", "")]
    if len(parts) != 1 or parts[0] in ("Any", "object"):
        return None
    return parts[0].split(".")[-1] if parts[0].split(".")[0] in ("proxmoxer",) else parts[0]


def _tuple_types(annotation: ast.expr | None) -> list[str | None] | None:
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in (
        "tuple",
        "Tuple",
    ):
        elts = (
            annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        )
        return [_type_name(e) for e in elts]
    return None


class Module:
    """One parsed file: its functions, classes, constants and API_CALLS."""

    def __init__(self, path: Path, rel: str, hints: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.rel = rel
        self.tree = ast.parse(path.read_text(), filename=rel)
        self.hints = dict(hints or {})
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.constants: dict[str, ast.expr] = {}
        self.imports: dict[str, str] = {}  # local name -> "module.name"
        self.api_calls: list[tuple[str, str, list[str]]] | None = None
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and node.value is not None:
                        self.constants[target.id] = node.value
                        if target.id == "API_CALLS":
                            self.api_calls = ast.literal_eval(node.value)
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.attr_types: dict[tuple[str, str], str] = {}  # (class, attr) -> type

    def methods(self) -> Iterator[tuple[str | None, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for func in self.functions.values():
            yield None, func
        for cls in self.classes.values():
            for node in ast.walk(cls):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield cls.name, node


class Project:
    """Every module scanned together (types and wrappers cross module boundaries)."""

    def __init__(self, modules: Sequence[Module]) -> None:
        self.modules = list(modules)
        self.by_dotted: dict[str, Module] = {}
        for module in self.modules:
            dotted = re.sub(r"\.py$", "", module.rel).replace("/", ".")
            for prefix in ("src.", "collections."):
                dotted = dotted.removeprefix(prefix)
            self.by_dotted[dotted] = module
        self.wrappers: dict[tuple[str | None, str], Wrapper] = {}

    def function(
        self, module: Module, name: str
    ) -> tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        if name in module.functions:
            return module, module.functions[name]
        target = module.imports.get(name)
        if target:
            mod_name, _, func = target.rpartition(".")
            other = self.by_dotted.get(mod_name)
            if other and func in other.functions:
                return other, other.functions[func]
        return None


class Scope:
    """Names of one function: parameters, single assignments, types."""

    def __init__(  # noqa: PLR0912  (one pass over the function body)
        self,
        project: Project,
        module: Module,
        cls: str | None,
        func: ast.FunctionDef | ast.AsyncFunctionDef | None,
    ) -> None:
        self.project = project
        self.module = module
        self.cls = cls
        self.func = func
        self.params: list[str] = []
        self.types: dict[str, str] = {}
        self.assigned: dict[str, list[ast.expr]] = {}
        self.kwarg: str | None = None
        if func is not None:
            args = func.args
            positional = [*args.posonlyargs, *args.args]
            if cls is not None and positional and positional[0].arg in ("self", "cls"):
                self.types[positional[0].arg] = cls
                positional = positional[1:]
            self.params = [a.arg for a in [*positional, *args.kwonlyargs]]
            for a in [*positional, *args.kwonlyargs]:
                t = _type_name(a.annotation)
                if t:
                    self.types[a.arg] = t
            self.kwarg = args.kwarg.arg if args.kwarg else None
            for node in ast.walk(func):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        self._bind(target, node.value)
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    self._bind(node.target, node.value)
                    t = _type_name(node.annotation)
                    if t and isinstance(node.target, ast.Name):
                        self.types[node.target.id] = t
                elif isinstance(node, ast.With | ast.AsyncWith):
                    for item in node.items:
                        if isinstance(item.optional_vars, ast.Name):
                            t = self.type_of(item.context_expr)
                            if t:
                                self.types.setdefault(item.optional_vars.id, t)
            for name, values in self.assigned.items():
                if name not in self.types and len(values) == 1:
                    t = self.type_of(values[0])
                    if t:
                        self.types[name] = t

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Call):
            called = self._called_function(value)
            types = _tuple_types(called[1].returns) if called else None
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Name):
                    self.assigned.setdefault(elt.id, []).append(ast.Constant(None))
                    if types and i < len(types) and types[i]:
                        self.types[elt.id] = str(types[i])

    def _called_function(
        self, call: ast.Call
    ) -> tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        if isinstance(call.func, ast.Name):
            return self.project.function(self.module, call.func.id)
        return None

    # -- types -------------------------------------------------------------------------
    def type_of(self, expr: ast.expr) -> str | None:  # noqa: PLR0911, PLR0912
        hinted = self.module.hints.get("types", {}).get(ast.unparse(expr))
        if hinted:
            return str(hinted)
        if isinstance(expr, ast.Name):
            return self.types.get(expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self.type_of(expr.value)
            if owner:
                for module in self.project.modules:
                    t = module.attr_types.get((owner, expr.attr))
                    if t:
                        return t
            return None
        if isinstance(expr, ast.BoolOp):
            types = {self.type_of(v) for v in expr.values}
            return types.pop() if len(types) == 1 else None
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Name):
                if expr.func.id == PROXMOXER or self.module.imports.get(expr.func.id, "").endswith(
                    f".{PROXMOXER}"
                ):
                    return PROXMOXER
                if expr.func.id in self.module.classes or (
                    expr.func.id in self.module.imports and expr.func.id[:1].isupper()
                ):
                    return expr.func.id
                called = self._called_function(expr)
                if called:
                    return _type_name(called[1].returns)
            if isinstance(expr.func, ast.Attribute) and expr.func.attr == PROXMOXER:
                return PROXMOXER
            if (
                isinstance(expr.func, ast.Attribute)
                and self.cls
                and isinstance(expr.func.value, ast.Name)
                and expr.func.value.id == "self"
            ):
                cls = self.module.classes.get(self.cls)
                for node in ast.walk(cls) if cls else []:
                    if isinstance(node, ast.FunctionDef) and node.name == expr.func.attr:
                        ret = _type_name(node.returns)
                        if ret:
                            return ret
                        for sub in ast.walk(node):
                            if isinstance(sub, ast.Return) and sub.value is not None:
                                t = Scope(self.project, self.module, self.cls, node).type_of(
                                    sub.value
                                )
                                if t:
                                    return t
        return None

    # -- strings -----------------------------------------------------------------------
    def resolve(self, expr: ast.expr, depth: int = 0) -> Resolved:  # noqa: PLR0911, PLR0912
        if depth > 8:
            return None
        hinted = self.module.hints.get("constants", {}).get(ast.unparse(expr))
        if hinted is not None:
            return str(hinted)
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.JoinedStr):
            out = ""
            for part in expr.values:
                if isinstance(part, ast.Constant):
                    out += str(part.value)
                elif isinstance(part, ast.FormattedValue):
                    inner = self.resolve(part.value, depth + 1)
                    out += inner if isinstance(inner, str) and inner.startswith("/") else "{x}"
            return out
        if isinstance(expr, ast.Name):
            if expr.id in self.params:
                return Param(expr.id)
            values = self.assigned.get(expr.id, [])
            if len(values) == 1:
                return self.resolve(values[0], depth + 1)
            if expr.id in self.module.constants and not values:
                return Scope(self.project, self.module, None, None).resolve(
                    self.module.constants[expr.id], depth + 1
                )
            return None
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.resolve(expr.left, depth + 1), self.resolve(expr.right, depth + 1)
            return left + right if isinstance(left, str) and isinstance(right, str) else None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            method = expr.func.attr
            if method in ("lstrip", "rstrip", "strip", "lower", "upper", "format"):
                inner = self.resolve(expr.func.value, depth + 1)
                if method == "format" and isinstance(inner, Param):
                    for kw in expr.keywords:
                        if kw.arg is None:
                            filler = _param_in(kw.value, self.params)
                            if filler:
                                return Param(inner.name, filler)
                if isinstance(inner, str) and method in ("lower", "upper"):
                    return getattr(inner, method)()
                if isinstance(inner, str) and method in ("lstrip", "rstrip", "strip"):
                    return "/" + inner.lstrip("/") if method == "lstrip" else inner
                return inner
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            called = self._called_function(expr)
            if called:
                module, func = called
                body = [
                    n
                    for n in func.body
                    if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
                ]
                if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                    inner_scope = Scope(self.project, module, None, func)
                    inner = inner_scope.resolve(body[0].value, depth + 1)
                    return inner if isinstance(inner, str) else None
        return None


def _param_in(expr: ast.expr, params: Sequence[str]) -> str | None:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in params:
            return node.id
    return None


# ----------------------------------------------------------------------------- chains


@dataclass
class Chain:
    segments: list[str | Param] = field(default_factory=list)
    unresolved: bool = False


def _chain(scope: Scope, expr: ast.expr, depth: int = 0) -> Chain | None:  # noqa: PLR0911, PLR0912
    """The proxmoxer resource an expression stands for, or None if it is none."""
    if depth > 12:
        return None
    if scope.type_of(expr) == PROXMOXER or ast.unparse(expr) in scope.module.hints.get("roots", ()):
        return Chain()
    if isinstance(expr, ast.Name):
        values = scope.assigned.get(expr.id, [])
        if len(values) == 1 and not isinstance(values[0], ast.Constant):
            return _chain(scope, values[0], depth + 1)
        return None
    if isinstance(expr, ast.Attribute):
        base = _chain(scope, expr.value, depth + 1)
        if base is None:
            return None
        return Chain([*base.segments, expr.attr], base.unresolved)
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name) and expr.func.id == "getattr" and len(expr.args) >= 2:
            base = _chain(scope, expr.args[0], depth + 1)
            if base is None:
                return None
            name = scope.resolve(expr.args[1])
            if isinstance(name, str):
                return Chain([*base.segments, name], base.unresolved)
            return Chain(base.segments, True)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in _TERMINALS:
            return None  # .get()/.post()... return data, not a resource
        base = _chain(scope, expr.func, depth + 1)
        if base is None:
            return None
        out = Chain(list(base.segments), base.unresolved)
        for arg in expr.args:
            value = scope.resolve(arg)
            if isinstance(value, str):
                out.segments += [s for s in value.split("/") if s]
            elif isinstance(value, Param) and not base.segments and _is_whole_path(arg):
                out.segments.append(value)
            elif not base.segments:  # prox(<path>): the whole path is unknown
                out.unresolved = True
            else:
                out.segments.append("{x}")
        return out
    return None


def _is_getattr(expr: ast.expr) -> bool:
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "getattr"
        and len(expr.args) >= 2
    )


def _is_whole_path(arg: ast.expr) -> bool:
    """``prox(path)`` / ``prox(path.lstrip("/"))``: the argument is the path itself."""
    return isinstance(arg, ast.Name) or (
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and isinstance(arg.func.value, ast.Name)
    )


def _template(segments: Sequence[str | Param]) -> str:
    return "/" + "/".join(str(s) for s in segments)


# ----------------------------------------------------------------------------- scanning


def _direct_calls(  # noqa: PLR0912  (each kind of call site)
    project: Project,
    module: Module,
    cls: str | None,
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    result: ScanResult,
) -> None:
    """proxmoxer chains inside one function: call sites, or a wrapper when the path
    (and method) come from the function's parameters."""
    scope = Scope(project, module, cls, func)
    getattr_funcs: dict[str, tuple[Chain, Resolved]] = {}
    for name, values in scope.assigned.items():
        value = values[0] if len(values) == 1 else None
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "getattr"
            and len(value.args) >= 2
        ):
            chain = _chain(scope, value.args[0])
            if chain is not None:
                getattr_funcs[name] = (chain, scope.resolve(value.args[1]))
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        chain: Chain | None = None
        method: str | Param | None = None
        if isinstance(node.func, ast.Attribute) and node.func.attr in _TERMINALS:
            chain = _chain(scope, node.func.value)
            method = _TERMINALS[node.func.attr]
        elif _is_getattr(node.func) or (
            isinstance(node.func, ast.Name) and node.func.id in getattr_funcs
        ):
            if isinstance(node.func, ast.Call):  # getattr(resource, name)(...)
                chain = _chain(scope, node.func.args[0])
                resolved = scope.resolve(node.func.args[1])
            else:
                chain, resolved = getattr_funcs[node.func.id]
            if isinstance(resolved, str) and resolved.lower() in _TERMINALS:
                method = _TERMINALS[resolved.lower()]
            elif isinstance(resolved, Param):
                method = resolved
            elif isinstance(resolved, str):
                continue  # getattr(node, "lxc")(vmid): a path segment, not a call
        if chain is None:
            continue
        segments = list(chain.segments)
        for arg in node.args:  # proxmoxer: .get("config") / .delete(vmid) add a segment
            value = scope.resolve(arg)
            if isinstance(value, str) and not isinstance(arg, ast.Starred):
                segments += [s for s in value.split("/") if s]
            else:
                segments.append("{x}")
        where = f"{module.rel}:{node.lineno}"
        params_in_path = [s for s in segments if isinstance(s, Param)]
        if isinstance(method, Param) and not params_in_path:
            continue  # getattr(resource, <parameter>): the enclosing chain reports it
        if params_in_path:
            if len(params_in_path) != 1 or len(segments) != 1:
                result.problems.append(
                    f"{where}: a path built from parameters the scan cannot follow"
                )
                continue
            path_param = params_in_path[0]
            result.wrappers.append(
                Wrapper(
                    owner_class=cls,
                    name=func.name,
                    module=module.rel,
                    method=scope.params.index(method.name)
                    if isinstance(method, Param)
                    else str(method),
                    path=scope.params.index(path_param.name),
                    path_args=scope.params.index(path_param.fills_from)
                    if path_param.fills_from
                    else None,
                    forwards_kwargs=any(kw.arg is None for kw in node.keywords),
                )
            )
            continue
        if chain.unresolved or method is None:
            result.problems.append(
                f"{where}: a proxmoxer call whose path or method cannot be resolved"
            )
            continue
        names = tuple(kw.arg for kw in node.keywords if kw.arg)
        result.calls.append(
            CallSite(
                module.rel,
                node.lineno,
                str(method),
                _template(segments),
                names,
                any(kw.arg is None for kw in node.keywords),
                module.rel,
            )
        )


def _wrapper_calls(
    project: Project,
    module: Module,
    cls: str | None,
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    result: ScanResult,
) -> None:
    scope = Scope(project, module, cls, func)
    by_name: dict[str, list[Wrapper]] = {}
    for wrapper in result.wrappers:
        by_name.setdefault(wrapper.name, []).append(wrapper)
    for node in ast.walk(func):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute | ast.Name):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        candidates = by_name.get(name, [])
        where = f"{module.rel}:{node.lineno}"
        receiver_type = (
            scope.type_of(node.func.value) if isinstance(node.func, ast.Attribute) else None
        )
        wrapper = next(
            (
                w
                for w in candidates
                if w.owner_class == receiver_type
                or (w.owner_class is None and isinstance(node.func, ast.Name))
            ),
            None,
        )
        if wrapper is None:
            if candidates and receiver_type is None and _looks_like_pve(scope, node):
                result.problems.append(
                    f"{where}: '{ast.unparse(node.func)}' looks like a PVE API call but the "
                    "receiver's type is unknown (annotate it)"
                )
            continue
        if (
            wrapper.module == module.rel
            and wrapper.owner_class == cls
            and wrapper.name == func.name
        ):
            continue  # the wrapper's own body
        args = list(node.args)
        if isinstance(wrapper.method, int):
            value = scope.resolve(args[wrapper.method]) if wrapper.method < len(args) else None
            method = value.upper() if isinstance(value, str) else None
        else:
            method = wrapper.method
        path = scope.resolve(args[wrapper.path]) if wrapper.path < len(args) else None
        if not isinstance(path, str) or method not in HTTP_METHODS:
            result.problems.append(
                f"{where}: call of {wrapper.name} with a path or method the scan cannot resolve"
            )
            continue
        skip = {
            wrapper.path,
            wrapper.method if isinstance(wrapper.method, int) else -1,
            wrapper.path_args if wrapper.path_args is not None else -1,
        }
        if any(i not in skip for i in range(len(args))):
            result.problems.append(f"{where}: positional arguments the scan cannot name")
            continue
        names = tuple(kw.arg for kw in node.keywords if kw.arg) if wrapper.forwards_kwargs else ()
        dynamic = wrapper.forwards_kwargs and any(kw.arg is None for kw in node.keywords)
        result.calls.append(
            CallSite(module.rel, node.lineno, method, path, names, dynamic, wrapper.module)
        )


def _looks_like_pve(scope: Scope, node: ast.Call) -> bool:
    if not node.args:
        return False
    first = scope.resolve(node.args[0])
    return bool(isinstance(first, str) and (first in HTTP_METHODS or first.startswith("/")))


def _attribute_types(project: Project) -> None:  # noqa: PLR0912
    """``self.x = <expr>`` in any method: the class attribute's type; a constructor
    parameter stored as ``self.x`` takes the type of the argument at construction."""
    stored: dict[tuple[str, str], tuple[Module, str]] = {}  # (class, param) stored in attr
    for module in project.modules:
        for cls, func in module.methods():
            if cls is None:
                continue
            scope = Scope(project, module, cls, func)
            for node in ast.walk(func):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            t = scope.type_of(node.value)
                            if t:
                                module.attr_types[(cls, target.attr)] = t
                            elif (
                                func.name == "__init__"
                                and isinstance(node.value, ast.Name)
                                and node.value.id in scope.params
                            ):
                                stored[(cls, node.value.id)] = (module, target.attr)
    for module in project.modules:
        for cls, func in module.methods():
            scope = Scope(project, module, cls, func)
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    klass = module.classes.get(node.func.id)
                    if klass is None:
                        continue
                    init = next(
                        (
                            n
                            for n in klass.body
                            if isinstance(n, ast.FunctionDef) and n.name == "__init__"
                        ),
                        None,
                    )
                    if init is None:
                        continue
                    params = [a.arg for a in init.args.args[1:]]
                    for i, arg in enumerate(node.args):
                        if i < len(params) and (klass.name, params[i]) in stored:
                            t = scope.type_of(arg)
                            owner, attr = stored[(klass.name, params[i])]
                            if t:
                                owner.attr_types[(klass.name, attr)] = t


def scan(
    files: Sequence[tuple[Path, str]], hints: Mapping[str, Mapping[str, Any]] | None = None
) -> ScanResult:
    """Scan ``(path, path relative to the repo)`` files together."""
    result = ScanResult()
    modules = []
    for path, rel in files:
        try:
            modules.append(Module(path, rel, (hints or {}).get(rel)))
        except SyntaxError as exc:
            result.problems.append(f"{rel}:{exc.lineno}: does not parse: {exc.msg}")
    project = Project(modules)
    _attribute_types(project)
    _attribute_types(project)  # a second pass sees attributes typed by the first
    for module in modules:
        for cls, func in module.methods():
            _direct_calls(project, module, cls, func, result)
    for module in modules:
        for cls, func in module.methods():
            _wrapper_calls(project, module, cls, func, result)
        if module.api_calls is not None:
            result.declared[module.rel] = module.api_calls
    return result
