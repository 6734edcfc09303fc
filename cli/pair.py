# `harness pair`: pair this machine with another through a relay so teams can span both. The code printed
# by `create` is the only secret that crosses between the two people; it is used once and expires.
from __future__ import annotations

from typing import Annotated

import typer

from harness.cli import output
from harness.io import home as homes
from harness.io import pairing

pair_app = typer.Typer(help="Pair machines through a relay (end-to-end sealed).", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]
HomeOpt = Annotated[
    str | None, typer.Option("--home", help="Data directory (default $HARNESS_HOME, else per user).")
]


def _fail(json_out: bool, error: pairing.PairingError | homes.HomeError) -> None:
    code = error.code if isinstance(error, pairing.PairingError) else "bad_request"
    detail = error.detail if isinstance(error, pairing.PairingError) else str(error)
    output.emit_error(json_out, code, detail)
    raise SystemExit(output.UNREACHABLE if code == pairing.OFFLINE else output.PROTOCOL_ERROR)


@pair_app.command()
def create(
    relay: Annotated[
        str | None,
        typer.Option("--relay", help="Relay URL, e.g. ws://127.0.0.1:8765 (default: the last used)."),
    ] = None,
    ttl: Annotated[
        float, typer.Option("--ttl", help="Seconds the code stays valid.")
    ] = pairing.DEFAULT_CODE_TTL,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a one-time pairing code; run `harness pair accept CODE` on the other machine."""
    where = homes.resolve_home(home)
    url = relay or pairing.relay_url(where)
    if url is None:
        output.emit_error(json_out, "bad_request", "name the relay: --relay ws://127.0.0.1:PORT")
        raise SystemExit(output.USAGE)
    try:
        code = pairing.create_code(where, url, ttl=ttl)
    except (pairing.PairingError, homes.HomeError) as error:
        _fail(json_out, error)
        return
    view = {"code": code.text(), "expiresAt": code.expires_at, "machineId": code.machine_id, "relay": url}
    if json_out:
        output.emit_json(view)
    else:
        print(code.text())
        print(f"(valid for {ttl:g} s, once; this machine's daemon must be running to complete it)")


@pair_app.command()
def accept(
    code: Annotated[str, typer.Argument(metavar="CODE")], home: HomeOpt = None, json_out: JsonOpt = False
) -> None:
    """Complete a pairing with the machine that printed CODE."""
    import trio  # only to accept a code: the other commands are synchronous

    try:
        peer = trio.run(pairing.accept_code, homes.resolve_home(home), code)
    except (pairing.PairingError, homes.HomeError) as error:
        _fail(json_out, error)
        return
    if json_out:
        output.emit_json(peer.view())
    else:
        output.say(f"paired with machine {peer.machine_id} (address {peer.address}) via {peer.relay}")


@pair_app.command("list")
def list_peers(home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """The machines paired with this one."""
    try:
        peers = [p.view() for p in pairing.peers(homes.resolve_home(home)).values()]
    except homes.HomeError as error:
        _fail(json_out, error)
        return
    if json_out:
        output.emit_json({"peers": peers})
        return
    for peer in peers or [{"machineId": "(no paired machines)", "address": "", "relay": ""}]:
        output.say(f"{peer['machineId']}  {peer['address']}  {peer['relay']}")


@pair_app.command()
def remove(
    machine: Annotated[str, typer.Argument(metavar="MACHINE_ID")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Forget a paired machine (its frames are refused from now on). Pairing its machine id again under
    another identity key (a reinstalled machine) needs this first."""
    try:
        peer = pairing.remove_peer(homes.resolve_home(home), machine)
    except homes.HomeError as error:
        _fail(json_out, error)
        return
    if peer is None:
        _fail(json_out, pairing.PairingError("not_found", f"machine {machine} is not paired with this one"))
        return
    if json_out:
        output.emit_json(peer.view())
    else:
        output.say(f"removed machine {peer.machine_id}")
