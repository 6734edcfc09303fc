# `harness channels enable|disable|status`: tab channels (spec/channels-v1.md), off by default. Enable and
# disable only write the setting in the data directory (0600, atomic); the daemon reads it on every pass, so
# they work whether or not it runs, and a disable made while it was down archives at its next start. Status
# shows the setting and, from a running daemon, the channel teams of the current epoch with their members.
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import output
from harness.cli.commands import Options, call, fail, show
from harness.cli.fast import TOP
from harness.io import home as homes

if (
    TYPE_CHECKING
):  # the setting's modules load the agent registry and tmux: only a command that runs needs them
    from harness.core import channels as ch

app = typer.Typer(help=TOP["channels"], no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")]
HomeOpt = Annotated[
    str | None, typer.Option("--home", help="Data directory (default $HARNESS_HOME, else per user).")
]


def _current(opts: Options) -> ch.Setting:
    from harness.core import channels as ch
    from harness.io.channel_setting import SettingError, read_setting

    try:
        return read_setting(homes.resolve_home(opts.home))
    except SettingError as error:
        fail(opts, output.PROTOCOL_ERROR, ch.Refusal.CORRUPT_SETTING.value, str(error))


def _set(opts: Options, setting: ch.Setting, changed: bool) -> None:
    if changed:
        from harness.io.channel_setting import write_setting

        try:
            write_setting(homes.ensure_home(homes.resolve_home(opts.home)), setting)
        except homes.HomeError as error:
            fail(opts, output.USAGE, "bad_request", str(error))
        except OSError as error:
            fail(opts, output.PROTOCOL_ERROR, "bad_request", f"cannot write the setting: {error}")
    daemon = homes.read_daemon_info(homes.resolve_home(opts.home)) is not None
    view = {
        "enabled": setting.enabled,
        "epoch": setting.epoch,
        "changed": changed,
        "applied": "by the running daemon within a second" if daemon else "when the daemon starts",
    }
    show(opts, view, output.show_mapping)


@app.command()
def enable(json_out: JsonOpt = False, home: HomeOpt = None) -> None:
    """Turn tab channels on: the engine agents of each tmux window form a team that follows the window."""
    from harness.core import channels as ch

    opts = Options().merge(json_out, home, None, None)
    current = _current(opts)
    wanted = ch.enabled_setting(current)
    _set(opts, wanted, wanted != current)


@app.command()
def disable(json_out: JsonOpt = False, home: HomeOpt = None) -> None:
    """Turn tab channels off: every channel team is archived; its history stays readable."""
    from harness.core import channels as ch

    opts = Options().merge(json_out, home, None, None)
    current = _current(opts)
    wanted = ch.disabled_setting(current)
    _set(opts, wanted, wanted != current)


@app.command()
def status(json_out: JsonOpt = False, home: HomeOpt = None) -> None:
    """The setting and, from the running daemon, the channel teams of this epoch and their members."""
    from harness.core import channels as ch

    opts = Options().merge(json_out, home, None, None)
    setting = _current(opts)
    view: dict[str, Any] = {"enabled": setting.enabled, "epoch": setting.epoch, "channels": None}
    if homes.read_daemon_info(homes.resolve_home(opts.home)) is not None:
        teams = call(opts, "list", team=False)["teams"]
        view["channels"] = [
            _channel(opts, team) for team in teams if ch.epoch_of(str(team["id"])) == setting.epoch
        ]
    show(opts, view, _show_status)


def _channel(opts: Options, team: dict[str, Any]) -> dict[str, Any]:
    opts.team = str(team["id"])
    roster = call(opts, "members")["members"]
    active = [
        {"id": m["id"], "name": m["name"], "agentId": m["agentId"]} for m in roster if m["state"] == "active"
    ]
    return {"teamId": team["id"], "name": team["name"], "state": team["state"], "members": active}


def _show_status(view: dict[str, Any], look: output.Look) -> None:
    output.say(f"channels: {'on' if view['enabled'] else 'off'} (epoch {view['epoch']})", look)
    if view["channels"] is None:
        output.say("the daemon is not running: no channel teams to show", look)
        return
    for channel in view["channels"]:
        names = ", ".join(member["name"] for member in channel["members"]) or "(no members)"
        output.say(f"{channel['teamId']}  {channel['name']}  {channel['state']}: {names}", look)
