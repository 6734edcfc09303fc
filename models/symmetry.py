# Symmetry reduction: when a scenario's plan looks the same after renaming its agents (every agent asks the
# next one round a ring, say), two worlds that differ only by that renaming behave alike, so the checker
# keeps one of them. A world's canonical key is the least of its renamed serializations over the plan's
# symmetry group. Agents, memberships, keys, names and question ids are all derived from indexes
# (m0, a0, k0, agent0, q0), so a renaming is a consistent rewrite of those tokens everywhere in the state.
#
# Worlds share most of their parts with their neighbours, so both the neutral tree of each part and its
# renamed serialization are memoized.
from __future__ import annotations

import enum
import functools
import itertools
import re
from collections.abc import Mapping
from typing import Any

import attrs

from harness.core import delivery as d

from .world import Config, World

TOKEN = re.compile(r"(?<![A-Za-z0-9])(agent|m|a|k|q)(\d+)(?![0-9])")

Renaming = tuple[tuple[str, str], ...]  # sorted (from, to) pairs: hashable, so renamings key the memo
Node = tuple[
    Any, ...
]  # ("s", str) | ("v", scalar) | ("m", ((key, node), ...)) | ("l", nodes) | ("set", nodes)


def plan_symmetries(config: Config) -> tuple[Renaming, ...]:
    """Every renaming of agents (with the planned asks it induces) that maps the plan onto itself.

    Agents must share one machine for a renaming to be a symmetry (machines are not renamed)."""
    if config.machines != 1:
        return ()
    plan = {
        (ask.asker, ask.to, ask.parent, ask.ttl_ms, ask.notify): index
        for index, ask in enumerate(config.asks)
    }
    found: list[Renaming] = []
    for perm in itertools.permutations(range(config.agents)):
        if list(perm) == list(range(config.agents)):
            continue
        asks: dict[int, int] = {}
        for (asker, to, parent, ttl, notify), index in plan.items():
            image = (perm[asker], perm[to], parent, ttl, notify)
            if parent is not None or image not in plan:
                break
            asks[index] = plan[image]
        else:
            renaming = {
                f"{p}{i}": f"{p}{perm[i]}" for i in range(config.agents) for p in ("agent", "m", "a", "k")
            }
            renaming.update({f"q{i}": f"q{j}" for i, j in asks.items()})
            found.append(tuple(sorted(renaming.items())))
    return tuple(found)


def canonical_key(world: World, renamings: tuple[Renaming, ...]) -> str:
    """The least serialization of `world` over the identity and `renamings`."""
    tree = _world_node(world)
    return min(_text(tree, renaming) for renaming in ((), *renamings))


def _world_node(world: World) -> Node:
    fields = {field.name: _node(getattr(world, field.name)) for field in attrs.fields(World)}
    # Per-agent tuples are positional: key them by agent so a renaming moves them with their agent.
    fields["screens"] = _map({f"a{i}": _node(screen) for i, screen in enumerate(world.screens)})
    fields["waiting"] = _map({f"m{i}": _node(waiting) for i, waiting in enumerate(world.waiting)})
    fields["asked"] = ("set", tuple(("s", f"q{index}") for index in world.asked))
    fields["system"] = _map(
        {
            "ledger": _node(world.system.ledger),
            "desks": _map({machine: _desk_node(desk) for machine, desk in world.system.desks.items()}),
        }
    )
    return _map(fields)


@functools.lru_cache(maxsize=1 << 16)
def _desk_node(desk: d.Desk) -> Node:
    """A desk, except that notice numbers become ranks within their agent's session (only that order is
    ever read) and texts become their lengths (they are rendered from names in creation order, which a
    renaming does not preserve, and no decision reads them but their size)."""
    ranks: dict[str, int] = {}
    by_agent: dict[str, list[d.Notice]] = {}
    for notice in desk.notices.values():
        by_agent.setdefault(notice.agent_id, []).append(notice)
    for notices in by_agent.values():
        for rank, notice in enumerate(sorted(notices, key=lambda n: n.seq)):
            ranks[notice.id] = rank
    notices_node = _map(
        {
            notice_id: _node(attrs.evolve(notice, seq=ranks[notice_id], text="x" * len(notice.text)))
            for notice_id, notice in desk.notices.items()
        }
    )
    fields = {field.name: _node(getattr(desk, field.name)) for field in attrs.fields(d.Desk)}
    fields["notices"] = notices_node
    fields["next_seq"] = ("v", None)
    return _map(fields)


def _map(entries: Mapping[str, Node]) -> Node:
    return ("m", tuple(entries.items()))


@functools.lru_cache(maxsize=1 << 16, typed=True)  # typed: True and 1 are different values here
def _node(value: Any) -> Node:
    if attrs.has(type(value)):
        fields = {field.name: _node(getattr(value, field.name)) for field in attrs.fields(type(value))}
        if "member_order" in fields:  # the order members joined in decides nothing: a set in disguise
            fields["member_order"] = ("set", fields["member_order"][1])
        return _map(fields)
    if isinstance(value, enum.Enum):
        return ("v", value.value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, Mapping):
        return ("m", tuple((str(key), _node(item)) for key, item in value.items()))
    if isinstance(value, frozenset):
        return ("set", tuple(_node(item) for item in value))
    if isinstance(value, tuple):
        return ("l", tuple(_node(item) for item in value))
    return ("v", value)


@functools.lru_cache(maxsize=1 << 18)
def _rename(text: str, renaming: Renaming) -> str:
    table = dict(renaming)
    return TOKEN.sub(lambda m: table.get(m.group(0), m.group(0)), text) if table else text


@functools.lru_cache(maxsize=1 << 14)  # serializations are large; parts recur mostly among close states
def _text(node: Node, renaming: Renaming) -> str:
    kind, body = node
    if kind == "s":
        return repr(_rename(body, renaming))
    if kind == "v":
        return repr(body)
    if kind == "m":
        return (
            "{"
            + ",".join(sorted(f"{_rename(key, renaming)!r}:{_text(item, renaming)}" for key, item in body))
            + "}"
        )
    if kind == "set":
        return "{" + ",".join(sorted(_text(item, renaming) for item in body)) + "}"
    return "[" + ",".join(_text(item, renaming) for item in body) + "]"
