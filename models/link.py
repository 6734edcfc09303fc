# The link between two machines, as io/remote.py runs it over the relay, made explicit so the checker can
# explore what the relay may do to it. Each direction has an ordered outbox: the sender hands over one item
# at a time (its request id is its place in the outbox) and retries it, as a new frame with the same request
# id, until the peer answers; only then does the next item go. The receiver opens each frame once (the
# sealing layer's replay window refuses an exact copy) and serves each request id once (its cache of answered
# request ids answers a retry without doing the work again). The relay may lose any frame or answer, repeat a
# frame, or hand frames over in any order (a delayed copy of an earlier attempt arriving after later traffic).
#
# Every frame is sealed under the bond of one pairing (spec/remote-v1.md section 4.2): when the two machines
# pair again, each side starts fresh seal state (no replay window remembers the old frames), and a frame the
# relay kept from the earlier pairing no longer opens. Only the bond stands between such a copy and the desk.
#
# This module is only the transport's bookkeeping: which frames are in flight, which items wait, and what the
# receiver answered. What a request does when it arrives is the destination's: its grant
# (core/remote_grant.py `admit`) decides whether the desk gets it, then the real reducers (core/system.py
# `Arrived`) apply it; models/world.py runs both, as io/remote.py `_execute_delivery` does. A refused request
# reaches no desk, and its answer is the refusal, which the receiver's cache repeats to a retry.
#
# Two reductions keep the space small without hiding a behaviour. A sender sends as soon as it may (the first
# attempt of the item it waits on, or a retry once nothing of that item is left in flight): a frame sent
# late is a frame sent early that the relay delays, and the relay may delay any frame. And an answer reaches
# its sender in the step its request is served, or is lost then: a slow answer only delays the sender's next
# send, and the retry its sender's timer sends meanwhile is an early retry (a fault of its own). Faults are
# bounded by budgets (losses, early retries, repeats, and all of them together), so the space is finite, and
# every state in which nothing can move has a drained link.
from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from operator import attrgetter

import attrs
from immutables import Map

from harness.core import delivery as d
from harness.core.commands import RecordDelivery
from harness.core.system import OwnerRequest
from harness.core.values import replace

DOWN = "down"  # the owner's requests to the remote machine's desk
UP = "up"  # the remote desk's reports to the owner's ledger
Command = OwnerRequest | RecordDelivery


@attrs.frozen
class Transport:
    """The transport's rules. Mutants (models/mutants.py) break one of them."""

    remembers_answered: bool = True  # the receiver answers a retried request id from its cache
    window: int = 1  # items of an outbox in progress at once: 1 hands over one at a time, in order


REAL_TRANSPORT = Transport()


@attrs.frozen
class LinkBounds:
    """What the relay may do, and how often: the budgets keep the explored space finite. At most
    2 * window + retries + duplicates frames are ever in flight."""

    remote: str  # the machine whose desk is reached through the link
    owner: str = "mach0"  # the owner's machine, at the other end: the sender of every request down the link
    losses: int = 1  # frames or answers the relay may lose (the sender's timer then sends a retry)
    retries: int = 1  # retries sent while an earlier attempt is still in flight (its answer is slow)
    duplicates: int = 1  # frames the relay may hand over twice
    faults: int = 2  # faults of any of those kinds, in all
    repairs: int = 0  # times the two machines may pair again (a new bond; not a fault, a person's act)


@attrs.frozen(cache_hash=True)
class Frame:
    """A sealed request frame in flight."""

    direction: str
    seq: int  # the request id: the item's place in its outbox
    attempt: int  # each attempt is its own frame (a new seal counter), with the same request id
    bond: int  # the pairing it was sealed under
    command: Command = attrs.field(eq=False)  # fixed by (direction, seq)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.direction, self.seq, self.attempt)


@attrs.frozen
class Item:
    seq: int
    command: Command
    attempts: int = 0  # frames sent for it so far


@attrs.frozen(cache_hash=True)
class Outbox:
    """One direction: the sender's ordered items, and the receiver's memory of what it opened and served."""

    items: tuple[Item, ...] = ()
    next_seq: int = 1
    served: frozenset[int] = frozenset()  # request ids the receiver answered (that may still come again)
    refused: Map[int, str] = attrs.field(factory=Map)  # of those, the ones answered with a refusal: its code
    opened: frozenset[tuple[int, int]] = frozenset()  # (seq, attempt) frames opened, copies still in flight


@attrs.frozen(cache_hash=True)
class Link:
    transport: Transport
    down: Outbox = Outbox()
    up: Outbox = Outbox()
    flight: tuple[Frame, ...] = ()  # sorted: a multiset of frames
    losses: int = 0
    retries: int = 0
    duplicates: int = 0
    faults: int = 0
    bond: int = 1  # the pairing frames are sealed under now; a frame of an earlier one does not open
    repairs: int = 0
    # Ghost bookkeeping for the properties (nothing in the protocol reads it): per notice, the report order
    # (UP seq) of the latest report the owner applied; the withdrawals that reached the remote desk.
    recorded: Map[str, int] = attrs.field(factory=Map)
    withdrawn: frozenset[str] = frozenset()

    @property
    def drained(self) -> bool:
        return not self.flight and not self.down.items and not self.up.items


def new_link(bounds: LinkBounds, transport: Transport) -> Link:
    return Link(
        transport,
        losses=bounds.losses,
        retries=bounds.retries,
        duplicates=bounds.duplicates,
        faults=bounds.faults,
        repairs=bounds.repairs,
    )


def outbox(link: Link, direction: str) -> Outbox:
    return link.down if direction == DOWN else link.up


def _with(link: Link, direction: str, box: Outbox, flight: tuple[Frame, ...] | None = None) -> Link:
    flight = link.flight if flight is None else _sorted(flight)
    if direction == DOWN:
        return replace(link, down=box, flight=flight)
    return replace(link, up=box, flight=flight)


def enqueue(link: Link, direction: str, command: Command) -> Link:
    """The sender's shell puts `command` at the end of the direction's outbox (and sends it if it may)."""
    box = outbox(link, direction)
    item = Item(box.next_seq, command)
    return _pump(_with(link, direction, replace(box, items=(*box.items, item), next_seq=box.next_seq + 1)))


def _pump(link: Link) -> Link:
    """Each sender sends what it may now: the first attempt of each item in its window, and a retry of one
    of them with nothing left in flight (its answer or its frame was lost)."""
    for direction in (DOWN, UP):
        box = outbox(link, direction)
        window = box.items[: link.transport.window]
        pending = {f.seq for f in link.flight if f.direction == direction}
        due = [index for index, item in enumerate(window) if item.seq not in pending]
        if due:
            items, frames = list(box.items), list(link.flight)
            for index in due:
                item = replace(items[index], attempts=items[index].attempts + 1)
                items[index] = item
                frames.append(Frame(direction, item.seq, item.attempts, link.bond, item.command))
            link = _with(link, direction, replace(box, items=tuple(items)), tuple(frames))
    return link


# --- what the link may do next ------------------------------------------------------------------------------


@attrs.frozen
class Move:
    label: str
    link: Link
    arrived: tuple[str, int, Command] | None = None  # (direction, seq, command) served by its receiver
    answered: bool = False  # with `arrived`: its answer reaches the sender in this step (else it is lost)
    refusal: tuple[Command, str] | None = None  # a retry answered from the cache with a refusal (its code)


def moves(link: Link) -> tuple[Move, ...]:
    """Every step the link may take: hand over any frame in flight (its answer returning or lost), lose or
    repeat one, a sender retrying early (its last attempt still in flight, its answer slow), or the two
    machines pairing again."""
    return _memo_moves(link, tuple(frame.command for frame in link.flight))


# Explored worlds share a link far more often than not (five to six per link in two-machines-lossy-link:
# they differ in their desks, screens or clock), and a link's moves are a function of the link alone. Its
# frames' commands are part of the key: a frame compares without its command, and two links that compare
# equal may still carry different commands in flight (the request ids of different histories).
@functools.lru_cache(maxsize=1 << 16)
def _memo_moves(link: Link, _commands: tuple[Command, ...]) -> tuple[Move, ...]:
    return tuple(_moves(link))


def _moves(link: Link) -> Iterator[Move]:
    for frame in _sorted(set(link.flight)):
        yield _hand_over(link, frame, answered=True)
        if link.losses > 0 and link.faults > 0:
            spent = replace(link, losses=link.losses - 1, faults=link.faults - 1)
            lost = replace(spent, flight=_without(link.flight, frame))
            yield Move(f"relay loses {describe_frame(frame)}", _pump(_collect(lost)))
            unanswered = _hand_over(spent, frame, answered=False)
            yield replace(unanswered, label=unanswered.label + ", and loses the answer")
        if link.duplicates > 0 and link.faults > 0:
            repeated = replace(
                link,
                flight=_sorted((*link.flight, frame)),
                duplicates=link.duplicates - 1,
                faults=link.faults - 1,
            )
            yield Move(f"relay repeats {describe_frame(frame)}", repeated)
    if link.retries > 0 and link.faults > 0:
        for direction in (DOWN, UP):
            box = outbox(link, direction)
            for index, item in enumerate(box.items[: link.transport.window]):
                if item.attempts == 0:
                    continue
                again = replace(item, attempts=item.attempts + 1)
                frame = Frame(direction, again.seq, again.attempts, link.bond, again.command)
                items = (*box.items[:index], again, *box.items[index + 1 :])
                sent = _with(link, direction, replace(box, items=items), (*link.flight, frame))
                label = f"{_sender(direction)} retries early (same request id) {describe_frame(frame)}"
                yield Move(label, replace(sent, retries=link.retries - 1, faults=link.faults - 1))
    # Fresh seal state both ways: the receivers forget which frames they opened. The frames in flight stay
    # with the relay, sealed under the old bond; the served request ids are remembered (by machine). With
    # nothing in flight, pairing again would change only the bond's number.
    if link.repairs > 0 and link.flight:
        fresh = replace(
            link,
            down=replace(link.down, opened=frozenset()),
            up=replace(link.up, opened=frozenset()),
            bond=link.bond + 1,
            repairs=link.repairs - 1,
        )
        yield Move(f"the machines pair again (bond {fresh.bond})", fresh)


def refuse(link: Link, direction: str, seq: int, code: str) -> Link:
    """The receiver answered request `seq` with a refusal: its cache answers a retry with the same."""
    box = outbox(link, direction)
    return _with(link, direction, replace(box, refused=box.refused.set(seq, code)))


def _hand_over(link: Link, frame: Frame, *, answered: bool) -> Move:
    """The receiver opens the frame and serves its request id (once, unless the rules are broken); its answer
    ends the sender's wait for that item, or is lost."""
    rest = _without(link.flight, frame)
    box = outbox(link, frame.direction)
    label = f"relay hands over {describe_frame(frame)}"
    key = (frame.seq, frame.attempt)
    if frame.bond != link.bond:  # sealed under an earlier pairing: it does not open (`forged`), silently
        refused = f"{label} (sealed under bond {frame.bond}: does not open)"
        return Move(refused, _pump(_collect(replace(link, flight=rest))))
    if key in box.opened:  # an exact copy of a frame already opened: the replay window refuses it, silently
        return Move(label + " (replay refused)", _pump(_collect(replace(link, flight=rest))))
    items = tuple(item for item in box.items if item.seq != frame.seq) if answered else box.items
    cached = frame.seq in box.served and link.transport.remembers_answered
    box = replace(box, items=items, served=box.served | {frame.seq}, opened=box.opened | {key})
    moved = _pump(_collect(_with(link, frame.direction, box, rest)))
    if cached:
        code = box.refused.get(frame.seq) if answered else None  # a lost answer says nothing to the sender
        if code is None:
            return Move(label + " (answered from the cache)", moved)
        return Move(
            f"{label} (answered from the cache: refused {code})", moved, refusal=(frame.command, code)
        )
    return Move(label, moved, (frame.direction, frame.seq, frame.command), answered=answered)


def _sorted(frames: Iterable[Frame]) -> tuple[Frame, ...]:
    return tuple(sorted(frames, key=_KEY))


_KEY = attrgetter("key")


def _without(flight: tuple[Frame, ...], frame: Frame) -> tuple[Frame, ...]:
    index = flight.index(frame)
    return flight[:index] + flight[index + 1 :]


def _collect(link: Link) -> Link:
    """Forget what can no longer matter: a receiver's memory of a frame with no copy left in flight, and of a
    request id its sender is done with and that has no frame left in flight. Nothing can ever ask about
    them again, so two links that differ only there behave alike."""
    for direction in (DOWN, UP):
        box = outbox(link, direction)
        if not box.opened and not box.served:
            continue
        frames = {(f.seq, f.attempt) for f in link.flight if f.direction == direction}
        live = {seq for seq, _attempt in frames} | {item.seq for item in box.items}
        opened = frozenset(key for key in box.opened if key in frames)
        served = frozenset(seq for seq in box.served if seq in live)
        if opened != box.opened or served != box.served:
            refused = Map({seq: code for seq, code in box.refused.items() if seq in served})
            link = _with(link, direction, replace(box, opened=opened, served=served, refused=refused))
    return link


# --- words --------------------------------------------------------------------------------------------------


def _sender(direction: str) -> str:
    return "owner" if direction == DOWN else "remote desk"


def describe_command(command: Command) -> str:
    if isinstance(command, RecordDelivery):
        reason = f" ({command.reason})" if command.reason else ""
        return f"report {command.notice_id} {command.state}{reason}"
    if isinstance(command, d.Submit | d.Withdraw | d.AnswerRetrieved):
        return f"{type(command).__name__} {command.notice_id}"
    if isinstance(command, d.InboxRead):
        return f"InboxRead {','.join(command.notice_ids)}"
    return type(command).__name__


def describe_frame(frame: Frame) -> str:
    bond = f" bond {frame.bond}" if frame.bond > 1 else ""
    return f"{frame.direction}#{frame.seq} attempt {frame.attempt}{bond} ({describe_command(frame.command)})"


def facts(link: Link) -> dict[str, str]:
    """Flat facts for trace diffs."""
    found: dict[str, str] = {}
    for direction in (DOWN, UP):
        box = outbox(link, direction)
        found[f"outbox {direction}"] = (
            ", ".join(f"#{i.seq} {describe_command(i.command)} x{i.attempts}" for i in box.items) or "-"
        )
        served = (
            f"#{seq}" + (f" refused {box.refused[seq]}" if seq in box.refused else "")
            for seq in sorted(box.served)
        )
        found[f"served {direction}"] = ", ".join(served) or "-"
    found["in flight"] = "; ".join(describe_frame(f) for f in link.flight) or "-"
    found["link budgets"] = (
        f"loss {link.losses}, early retry {link.retries}, repeat {link.duplicates}, in all {link.faults}"
    )
    found["pairing"] = f"bond {link.bond}, {link.repairs} more"
    return found


__all__ = [
    "DOWN",
    "UP",
    "Frame",
    "Item",
    "Link",
    "LinkBounds",
    "REAL_TRANSPORT",
    "Move",
    "Outbox",
    "Transport",
    "describe_command",
    "enqueue",
    "facts",
    "moves",
    "new_link",
    "outbox",
    "refuse",
]
