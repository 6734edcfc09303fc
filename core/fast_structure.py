# A fast path for core/codec.py's structuring, for the documents that are almost always well formed: the
# checkpoints a daemon reads at every start (a desk of 10,000 records, a hundred teams) and the journal
# entries after them. The strict cattrs converter spends most of its time calling one hook per scalar and
# collecting detailed errors nobody reads when the document is good.
#
# Its one rule: it never decides anything the converter would decide differently. It builds a value only from
# shapes it checks itself (exact types: a str, an int, a bool, a list, a dict with exactly the known keys, an
# enum's own value) and builds it the way the converter does (the same constructors, the same defaults for
# absent keys). Anything else (a missing key, an extra one, a str subclass, a tuple where JSON gives a list)
# raises, and the caller asks the converter, which accepts it with the same value or names what is wrong.
# Types it has no fast form for are structured by the converter's own hook in place.
from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from immutables import Map

Structure = Callable[[object], Any]
SlowHook = Callable[[Any], Callable[[Any, Any], Any]]  # the converter's get_structure_hook


class Unsure(Exception):
    """The fast path does not vouch for this input: the converter decides."""


_SCALARS: dict[Any, str] = {str: "str", int: "int", bool: "bool"}


class Compiler:
    """Structure functions for types, made once per type. `slow` gives the converter's hook for a type;
    `unions` maps each tagged union the converter knows to its tag key and its classes by tag."""

    def __init__(
        self,
        slow: SlowHook,
        rename: Callable[[str], str],
        unions: Mapping[Any, tuple[str, Mapping[str, type[Any]]]],
    ) -> None:
        self._slow = slow
        self._rename = rename
        self._unions = unions
        self._made: dict[Any, Structure] = {}

    def structure_fn(self, tp: Any) -> Structure:
        made = self._made.get(tp)
        if made is None:
            # A type that contains itself (a board inside a board's field) finds this forwarder meanwhile.
            cell: list[Structure] = []
            self._made[tp] = lambda x: cell[0](x)  # noqa: PLW0108  # cell[0] does not exist yet
            made = self._make(tp)
            cell.append(made)
            self._made[tp] = made
        return made

    def _make(self, tp: Any) -> Structure:
        scope: dict[str, Any] = {}
        inline = self._inline(tp, "x", "t", scope)
        if inline is not None:
            return self._source("\n".join([*inline, "return x"]), scope, tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is None and isinstance(tp, type) and attrs.has(tp):
            return self._attrs(tp)
        if tp in self._unions:
            return self._tagged(tp)
        inner = _optional_of(tp)
        if inner is not None:
            return self._source("return None if x is None else f(x)", {"f": self.structure_fn(inner)}, tp)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item = self._inline(args[0], "e", "t", scope)
            if item is None:
                scope["f"] = self.structure_fn(args[0])
                body = ["if type(x) is not list: raise U", "return tuple([f(e) for e in x])"]
            else:  # scalars checked inline (an enum's value becomes its member)
                body = ["if type(x) is not list: raise U", "r = []", "for e in x:"]
                body += [*_indent([*item, "r.append(e)"]), "return tuple(r)"]
            return self._source("\n".join(body), scope, tp)
        if origin is tuple and args and Ellipsis not in args:
            body = [f"if type(x) is not list or len(x) != {len(args)}: raise U"]
            for n, arg in enumerate(args):
                body.append(f"e{n} = x[{n}]")
                body += self._field(arg, f"e{n}", f"t{n}", scope)
            body.append("return (" + "".join(f"e{n}, " for n in range(len(args))) + ")")
            return self._source("\n".join(body), scope, tp)
        if origin is Map and len(args) == 2:
            body = ["if type(x) is not dict: raise U", "r = {}", "for k, v in x.items():"]
            checks = [*self._field(args[0], "k", "tk", scope), *self._field(args[1], "v", "tv", scope)]
            body += _indent(checks)
            body += ["    r[k] = v", "return Map(r)"]
            return self._source("\n".join(body), {**scope, "Map": Map}, tp)
        if origin is frozenset and len(args) == 1:
            body = ["if type(x) is not list: raise U", "r = []", "for e in x:"]
            body += _indent([*self._field(args[0], "e", "t", scope), "r.append(e)"])
            return self._source("\n".join([*body, "return frozenset(r)"]), scope, tp)
        hook = self._slow(tp)
        return lambda x: hook(x, tp)

    def _inline(self, tp: Any, var: str, name: str, scope: dict[str, Any]) -> list[str] | None:
        """Lines that check `var` as `tp` in place (and turn an enum's value into its member), for the types
        cheaper checked inline than called: scalars, enums of str values, and either of them or None."""
        if tp in _SCALARS:
            return [f"if type({var}) is not {_SCALARS[tp]}: raise U"]
        if tp is float:
            return [f"if type({var}) is not float and type({var}) is not int: raise U"]
        if typing.get_origin(tp) is None and isinstance(tp, type) and issubclass(tp, enum.Enum):
            if not all(type(member.value) is str for member in tp):
                return None
            scope[name] = dict(tp._value2member_map_)
            return [f"if type({var}) is not str: raise U", f"{var} = {name}[{var}]"]
        inner = _optional_of(tp)
        if inner is not None:
            checks = self._inline(inner, var, name, scope)
            return None if checks is None else [f"if {var} is not None:", *_indent(checks)]
        return None

    def _field(self, tp: Any, var: str, name: str, scope: dict[str, Any]) -> list[str]:
        """Lines that structure `var` as `tp` in place: inline when they can, else by its function."""
        inline = self._inline(tp, var, name, scope)
        if inline is not None:
            return inline
        scope[name] = self.structure_fn(tp)
        return [f"{var} = {name}({var})"]

    def _attrs(self, cls: type[Any]) -> Structure:
        fields = attrs.fields(cls)
        if any(not field.init or field.kw_only for field in fields):
            hook = self._slow(cls)
            return lambda x: hook(x, cls)
        hints = typing.get_type_hints(cls)
        scope: dict[str, Any] = {"cls": cls, "known": frozenset(self._rename(field.name) for field in fields)}
        lines = ["if type(x) is not dict or not x.keys() <= known: raise U"]
        for n, field in enumerate(fields):
            key, var = self._rename(field.name), f"v{n}"
            checks = self._field(hints[field.name], var, f"f{n}", scope)
            if field.default is attrs.NOTHING:
                lines += [f"{var} = x[{key!r}]", *checks]
                continue
            # Absent: the class's own default, as the converter (which passes nothing) leaves it.
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]  # attrs.Factory is a class
                if default.takes_self:
                    hook = self._slow(cls)
                    return lambda x: hook(x, cls)
                scope[f"d{n}"] = default.factory
                absent = f"{var} = d{n}()"
            else:
                scope[f"d{n}"] = default
                absent = f"{var} = d{n}"
            lines += [f"if {key!r} in x:", f"    {var} = x[{key!r}]", *_indent(checks)]
            lines += ["else:", f"    {absent}"]
        # Positionally, in field order: the same __init__ the converter calls, without its keyword cost.
        lines.append("return cls(" + "".join(f"v{n}, " for n in range(len(fields))) + ")")
        return self._source("\n".join(lines), scope, cls)

    def _tagged(self, union: Any) -> Structure:
        tag, classes = self._unions[union]
        scope = {"by_tag": {name: self.structure_fn(cls) for name, cls in classes.items()}, "tag": tag}
        body = (
            "if type(x) is not dict or type(x.get(tag)) is not str: raise U\n"
            "rest = dict(x)\n"
            "return by_tag[rest.pop(tag)](rest)"
        )
        return self._source(body, scope, union)

    def _source(self, body: str, scope: dict[str, Any], tp: Any) -> Structure:
        filename = f"<fast structure of {tp!r}>"  # what a traceback or a profile shows
        source = "def structure(x):\n" + "".join(f"    {line}\n" for line in body.splitlines())
        namespace: dict[str, Any] = {"U": Unsure, **scope}
        exec(compile(source, filename, "exec"), namespace)  # code made here, from type hints only
        made: Structure = namespace["structure"]
        return made


def _optional_of(tp: Any) -> Any:
    """X for `X | None` (any other type: None)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 2 and types.NoneType in args:
        return next(arg for arg in args if arg is not types.NoneType)
    return None


def _indent(lines: list[str]) -> list[str]:
    return [f"    {line}" for line in lines]
