# Symmetry reduction: when a scenario's plan looks the same after renaming its agents (every agent asks the
# next one round a ring, say), two worlds that differ only by that renaming behave alike, so the checker
# keeps one of them. Agents, memberships, keys, names and question ids are all derived from indexes
# (m0, a0, k0, agent0, q0), so a renaming is a consistent rewrite of those tokens everywhere in the state.
#
# A world's canonical key is the least of its renamed images over the plan's symmetry group. `reference_key`
# says what that means in the plainest way (the least renamed serialization, as text); `canonical_key` is the
# same equivalence made cheap, because serializing and renaming every explored world was most of a
# symmetric scenario's search time. It hash-conses: every distinct neutral tree and every distinct renamed
# image is interned once as a small integer, so an image is built from the images of its parts (which
# neighbouring worlds share) and two images are equal exactly when their integers are. Images are made
# canonical (maps and sets sorted by their renamed entries) before interning, so a world's key is the least
# integer in its orbit; as the renamings form a group, every world of one orbit has the same set of images.
# The integers are only meaningful within one process, which is all a search needs.
from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from immutables import Map

from harness.core import delivery as d

from .world import Config, World

TOKEN = re.compile(r"(?<![A-Za-z0-9])(agent|m|a|k|q)(\d+)(?![0-9])")

Renaming = tuple[tuple[str, str], ...]  # sorted (from, to) pairs: hashable, so renamings key the memo
# An interned tree node: ("s", str) | ("v", type, scalar) | ("r", field names, nodes) | ("m", ((key, node),
# ...)) | ("l", nodes) | ("set", nodes), where the nodes inside are the integers of already interned nodes.
Shape = tuple[Any, ...]
Renamer = Callable[[str], str]


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


def canonical_key(world: World, renamings: tuple[Renaming, ...]) -> int:
    """The least interned image of `world` over the identity and `renamings` (a group): equal for two
    worlds exactly when `reference_key` is."""
    return KEYS.key(world, renamings)


def reference_key(world: World, renamings: tuple[Renaming, ...]) -> str:
    """The least serialization of `world` over the identity and `renamings`: the specification of
    `canonical_key`, without its memos (tests and scripts/bench_checker.py compare the two)."""
    return min(_text(_reference_tree(world), _renamer(dict(renaming))) for renaming in ((), *renamings))


# --- the neutral tree: what of a world a key sees -----------------------------------------------------------


# The world's fields a key sees otherwise than as they are: per-agent tuples become maps keyed by agent (a
# renaming moves them with their agent) and planned-ask indexes become question ids.
_VIEWS: dict[str, Callable[[Any], Any]] = {
    "screens": lambda screens: {f"a{i}": screen for i, screen in enumerate(screens)},
    "waiting": lambda waiting: {f"m{i}": wait for i, wait in enumerate(waiting)},
    "asked": lambda asked: frozenset(f"q{index}" for index in asked),
    "system": lambda system: {"ledger": system.ledger, "desks": system.desks, "durable": system.durable},
}


def _parts(world: World) -> dict[str, Any]:
    """The world's fields, each seen through its view (`_VIEWS`)."""
    fields = _fields(world)
    for name, view in _VIEWS.items():
        fields[name] = view(fields[name])
    return fields


def _ranks(desk: d.Desk) -> dict[str, int]:
    """Each notice's rank within its agent's notices: a desk's notice numbers count every notice it ever took,
    in creation order, which a renaming does not preserve, and only their order within a session is read."""
    return _ranks_of(desk.notices)


def _ranks_of(notices: Map[str, d.Notice]) -> dict[str, int]:
    by_agent: dict[str, list[d.Notice]] = {}
    for notice in notices.values():
        by_agent.setdefault(notice.agent_id, []).append(notice)
    return {
        notice.id: rank
        for notices in by_agent.values()
        for rank, notice in enumerate(sorted(notices, key=lambda n: n.seq))
    }


def _desk_fields(desk: d.Desk) -> dict[str, Any]:
    """A desk, with its notices' numbers as ranks (see _ranks), their texts as lengths (rendered from names in
    creation order too, and no decision reads them but their size) and no next number."""
    ranks = _ranks(desk)
    notices = {
        notice_id: _fields(notice) | {"seq": ranks[notice_id], "text": len(notice.text)}
        for notice_id, notice in desk.notices.items()
    }
    return _fields(desk) | {"notices": notices, "next_seq": None}


_NAMES: dict[type, tuple[str, ...] | None] = {}


def _names(cls: type) -> tuple[str, ...] | None:
    """The field names of an attrs class (None for any other type)."""
    if cls not in _NAMES:
        _NAMES[cls] = tuple(field.name for field in attrs.fields(cls)) if attrs.has(cls) else None
    return _NAMES[cls]


def _fields(value: Any) -> dict[str, Any]:
    """An attrs record's fields by name; the order members joined in decides nothing: a set in disguise."""
    fields = {name: getattr(value, name) for name in _names(type(value)) or ()}
    if "member_order" in fields:
        fields["member_order"] = frozenset(fields["member_order"])
    return fields


# --- the reference: plain serialization ---------------------------------------------------------------------


def _reference_tree(value: Any) -> Shape:
    """`value` as a tree of ("s", text), ("v", scalar), ("m", {key: tree}), ("set", [tree]), ("l", [tree])."""
    if isinstance(value, World):
        return _reference_tree(_parts(value))
    if isinstance(value, d.Desk):
        return _reference_tree(_desk_fields(value))
    if _names(type(value)) is not None:
        return _reference_tree(_fields(value))
    if isinstance(value, enum.Enum):
        return ("v", value.value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, Mapping):
        return ("m", {str(key): _reference_tree(item) for key, item in value.items()})
    if isinstance(value, frozenset):
        return ("set", [_reference_tree(item) for item in value])
    if isinstance(value, tuple):
        return ("l", [_reference_tree(item) for item in value])
    return ("v", value)


def _text(tree: Shape, rename: Renamer) -> str:
    kind, body = tree
    if kind == "s":
        return repr(rename(body))
    if kind == "v":
        return repr(body)
    if kind == "m":
        return (
            "{"
            + ",".join(sorted(f"{rename(key)!r}:{_text(item, rename)}" for key, item in body.items()))
            + "}"
        )
    if kind == "set":
        return "{" + ",".join(sorted(_text(item, rename) for item in body)) + "}"
    return "[" + ",".join(_text(item, rename) for item in body) + "]"


def _renamer(table: dict[str, str]) -> Renamer:
    def rename(text: str) -> str:
        return TOKEN.sub(lambda m: table.get(m.group(0), m.group(0)), text) if table else text

    return rename


# --- the fast key: hash-consed trees and images ----------------------------------------------------------


class KeyTable:
    """The intern table of shapes, the neutral node of each live value (first by identity: explored worlds
    share most of their parts with their neighbours, and an identity lookup never hashes a deep value), and
    the image of each node under each renaming (renaming 0 is the identity)."""

    def __init__(self, live_limit: int = 1 << 18) -> None:
        self.live_limit = live_limit  # values remembered by identity; past this it starts again (nodes stay)
        self.ids: dict[Shape, int] = {}
        self.shapes: list[Shape] = []
        self.live: dict[int, tuple[object, int]] = {}  # id(value) -> (value kept alive, node)
        # The node of a value seen through a view (a world's field, a desk's notices), by the identity of the
        # value: a view is a new object each time, so `live` cannot remember it, while its source is shared.
        self.views: dict[tuple[str, int], tuple[object, int]] = {}
        # Then by value (records, maps and sets keep their hash): a new copy of an old value, which is what
        # reducers and canonical_world make of every record they pass through. One record type holds one
        # type per field, so values equal by == are equal by their serialization too.
        self.equal: dict[object, int] = {}
        self.images: dict[tuple[int, int], int] = {}  # (node, renaming number) -> image node
        self.numbers: dict[Renaming, int] = {(): 0}
        self.renamers: list[Renamer] = [_renamer({})]
        self.renamed: dict[tuple[str, int], str] = {}

    def key(self, world: World, renamings: tuple[Renaming, ...]) -> int:
        root = self.build(world)  # a world is seen once: not worth keeping alive by identity
        return min(self.image(root, self.number(renaming)) for renaming in ((), *renamings))

    def intern(self, shape: Shape) -> int:
        found = self.ids.get(shape)
        if found is None:
            found = self.ids[shape] = len(self.shapes)
            self.shapes.append(shape)
        return found

    def node(self, value: Any) -> int:
        if isinstance(value, str):
            return self.intern(("s", value))
        if value is None or isinstance(value, int | enum.Enum):
            scalar = value.value if isinstance(value, enum.Enum) else value  # before int: IntEnum is both
            return self.intern(("v", type(scalar), scalar))
        if type(value) is dict:  # a view made for this key alone (see _parts): nothing else will share it
            return self.build(value)
        entry = self.live.get(id(value))
        if entry is not None and entry[0] is value:
            return entry[1]
        if type(value) is tuple:  # its hash is not kept: looking it up by value costs as much as building it
            node = self.build(value)
        else:
            found = self.equal.get(value)
            node = self.build(value) if found is None else found
            if found is None:
                self.equal[value] = node
        if len(self.live) >= self.live_limit:
            self.live.clear()
            self.equal.clear()
            self.views.clear()
        self.live[id(value)] = (value, node)
        return node

    def viewed(self, name: str, value: Any, view: Callable[[Any], Any] | None) -> int:
        """`self.node(view(value))` (None: a desk's notices, `self.notices(value)`), remembered by the
        identity of `value`."""
        entry = self.views.get((name, id(value)))
        if entry is not None and entry[0] is value:
            return entry[1]
        node = self.notices(value) if view is None else self.node(view(value))
        self.views[(name, id(value))] = (value, node)
        return node

    def world(self, world: World) -> int:
        """`self.record(_parts(world))`, each view's node remembered by its field's identity."""
        fields = _fields(world)
        return self.intern(
            (
                "r",
                tuple(fields),
                tuple(
                    self.node(value) if (view := _VIEWS.get(name)) is None else self.viewed(name, value, view)
                    for name, value in fields.items()
                ),
            )
        )

    def build(self, value: Any) -> int:
        if isinstance(value, World):
            return self.world(value)
        if isinstance(value, d.Desk):
            return self.desk(value)
        if _names(type(value)) is not None:
            return self.record(_fields(value))
        if isinstance(value, Mapping):
            return self.intern(("m", tuple((str(key), self.node(item)) for key, item in value.items())))
        if isinstance(value, frozenset):
            return self.intern(("set", tuple(self.node(item) for item in value)))
        if isinstance(value, tuple):
            return self.intern(("l", tuple(self.node(item) for item in value)))
        return self.intern(("v", type(value), value))

    def record(self, fields: dict[str, Any]) -> int:
        """A record's fields: their names are a type's, in its order, so an image neither renames nor sorts
        them (the reference sorts them: a fixed order either way)."""
        return self.intern(("r", tuple(fields), tuple(self.node(value) for value in fields.values())))

    def desk(self, desk: d.Desk) -> int:
        """`_desk_fields(desk)`, from the nodes of its notices as they are (shared with its neighbours')."""
        fields = _fields(desk) | {"next_seq": None}
        return self.intern(
            (
                "r",
                tuple(fields),
                tuple(
                    self.viewed("notices", value, None) if name == "notices" else self.node(value)
                    for name, value in fields.items()
                ),
            )
        )

    def notices(self, notices: Map[str, d.Notice]) -> int:
        """A desk's notices, each with its rank (see _ranks): a desk's sessions change more often than its
        notices, so this is remembered by the identity of the notices' map (`viewed`)."""
        ranks = _ranks_of(notices)
        return self.intern(("m", tuple((key, self.notice(n, ranks[key])) for key, n in notices.items())))

    def notice(self, notice: d.Notice, rank: int) -> int:
        _kind, names, values = self.shapes[self.node(notice)]
        changed = {"seq": self.node(rank), "text": self.node(len(notice.text))}
        return self.intern(
            ("r", names, tuple(changed.get(name, v) for name, v in zip(names, values, strict=True)))
        )

    def number(self, renaming: Renaming) -> int:
        found = self.numbers.get(renaming)
        if found is None:
            found = self.numbers[renaming] = len(self.renamers)
            self.renamers.append(_renamer(dict(renaming)))
        return found

    def rename(self, text: str, number: int) -> str:
        if number == 0:
            return text
        found = self.renamed.get((text, number))
        if found is None:
            found = self.renamed[(text, number)] = self.renamers[number](text)
        return found

    def image(self, node: int, number: int) -> int:
        """The node of `node` renamed by renaming `number`, with its maps and sets in canonical order."""
        found = self.images.get((node, number))
        if found is not None:
            return found
        kind, body, *rest = self.shapes[node]
        if kind == "r":
            found = self.intern(("r", body, tuple(self.image(value, number) for value in rest[0])))
        elif kind == "s":
            found = self.intern(("s", self.rename(body, number)))
        elif kind == "v":
            found = node
        elif kind == "m":
            found = self.intern(
                ("m", tuple(sorted((self.rename(k, number), self.image(v, number)) for k, v in body)))
            )
        elif kind == "set":
            found = self.intern(("set", tuple(sorted(self.image(item, number) for item in body))))
        else:
            found = self.intern(("l", tuple(self.image(item, number) for item in body)))
        self.images[(node, number)] = found
        return found


KEYS = KeyTable()  # one per process: its integers mean nothing elsewhere
