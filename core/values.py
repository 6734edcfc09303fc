# A faster `attrs.evolve` for the reducers' frozen records: evolve re-reads field metadata and goes through
# keyword arguments on every call, which was most of a reducer step's time (scripts/bench_core.py).
from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

import attrs

R = TypeVar("R")

_LAYOUT: dict[type[Any], tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]] = {}


def replace(record: R, **changes: Any) -> R:
    """A copy of the frozen attrs `record` with `changes` applied, built through its own __init__."""
    cls = type(record)
    layout = _LAYOUT.get(cls)
    if layout is None:
        names = tuple(field.name for field in attrs.fields(cls))  # type: ignore[arg-type]  # R is an attrs class
        getter = attrgetter(*names)
        if len(names) == 1:  # attrgetter of one name returns the value itself, not a 1-tuple
            getter = attrgetter(*names, *names)
        layout = _LAYOUT[cls] = (getter, {name: i for i, name in enumerate(names)})
    read_all, index = layout
    values = list(read_all(record))[: len(index)]
    for name, value in changes.items():
        try:
            values[index[name]] = value
        except KeyError:
            raise TypeError(f"{cls.__name__} has no field {name!r}") from None
    return cls(*values)
