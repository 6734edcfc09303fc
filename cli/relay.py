# `harness relay serve`: run the relay that routes sealed frames between paired machines (127.0.0.1 only
# here). It holds no keys and stores nothing; on exit it prints its counters.
from __future__ import annotations

import contextlib
import json
import sys
from typing import Annotated

import trio
import typer

from harness.io.relay import HOST, Relay, RelayLimits

relay_app = typer.Typer(help="The relay between paired machines.", no_args_is_help=True)


@relay_app.command()
def serve(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0 picks a free one).")] = 8765,
    queue: Annotated[
        int, typer.Option("--queue", help="Frames queued per connection.")
    ] = RelayLimits().queue_frames,
) -> None:
    """Serve until Ctrl-C."""
    relay = Relay(RelayLimits(queue_frames=queue))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(relay.serve, port)
            print(f"harness relay: listening on ws://{HOST}:{bound}", file=sys.stderr, flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        trio.run(main)
    print(json.dumps({"stats": dict(relay.stats)}), file=sys.stderr)
