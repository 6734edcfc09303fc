# `harness relay serve`: run the relay that routes sealed frames between paired machines (127.0.0.1 only
# here). It holds no keys and stores nothing; on exit it prints its counters. `--record FILE` appends every
# message it sees to FILE, so a test or an auditor can check that it only ever held routing and ciphertext.
# Refusals go to stderr, at most one line per kind per minute (each is counted in the printed stats).
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, TextIO

import typer

from harness.cli import output
from harness.io.relay import HOST, Relay, RelayLimits
from harness.io.stderr_log import stderr_log

relay_app = typer.Typer(help="The relay between paired machines.", no_args_is_help=True)


say = stderr_log("harness relay")


class Recorder:
    """Appends one JSON line per message the relay sees, flushed at once (a killed relay loses none)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, direction: str, message: str) -> None:
        line = {"at": round(time.time() * 1000), "direction": direction, "message": message}
        self.out.write(json.dumps(line) + "\n")  # ASCII: a stranger's C1 or bidi bytes stay escaped
        self.out.flush()


@relay_app.command()
def serve(
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0 picks a free one).")
    ] = 8765,
    queue: Annotated[
        int, typer.Option("--queue", min=1, help="Frames queued per connection.")
    ] = RelayLimits().queue_frames,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            min=1,
            help="Authenticated connections at once; one more closes the one that routed least recently.",
        ),
    ] = RelayLimits().max_connections,
    max_pending: Annotated[
        int,
        typer.Option(
            "--max-pending",
            min=1,
            help="Connections still proving their address; one more closes the oldest of them.",
        ),
    ] = RelayLimits().max_pending,
    *,
    held_bytes: Annotated[
        int,
        typer.Option(
            "--held-bytes",
            min=1 << 20,
            help="Bytes the authenticated connections may make the relay hold at once (unfinished messages, "
            "queued frames); past it, the connection that has held bytes the longest is closed.",
        ),
    ] = RelayLimits().held_bytes,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            help="Append every message the relay sees to this file, one JSON line each, flushed per line: "
            '{"at": unix ms, "direction": "in" (from a machine) | "out" (to a machine), "message": the '
            "WebSocket text as received or sent}. Only for audits and tests: it grows without bound.",
        ),
    ] = None,
) -> None:
    """Serve until Ctrl-C or SIGTERM (with --record FILE, also log every message it routes, for audits)."""
    import trio

    from harness.io.listeners import raise_open_files_limit

    with contextlib.ExitStack() as stack:
        out = None
        if record is not None:  # private (0600) like the rest of a machine's remote state
            try:
                fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            except OSError as error:
                output.emit_error(False, "bad_request", f"cannot open --record {record}: {error}")
                raise SystemExit(output.USAGE) from None
            out = stack.enter_context(open(fd, "a", encoding="utf-8"))
        observe = None if out is None else Recorder(out)
        limits = RelayLimits(
            queue_frames=queue,
            max_connections=max_connections,
            max_pending=max_pending,
            held_bytes=held_bytes,
        )
        relay = Relay(limits, observe=observe, log=say)
        raise_open_files_limit()  # each connection is a descriptor: the caps bound them, not the default

        async def main() -> None:
            # Ctrl-C or SIGTERM end it cleanly, so that the counters below are printed (not a traceback).
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as nursery:
                    bound = await nursery.start(relay.serve, port)
                    say(f"listening on ws://{HOST}:{bound}")
                    async for received in signals:
                        say(f"stopping on {signal.Signals(received).name}")
                        nursery.cancel_scope.cancel()

        try:
            trio.run(main)
        except BaseException as error:
            cause = error
            while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                cause = cause.exceptions[0]  # the relay fails at start inside trio's nursery
            if not isinstance(cause, OSError):
                raise
            output.emit_error(False, "bad_request", f"cannot serve the relay on port {port}: {cause}")
            raise SystemExit(output.PROTOCOL_ERROR) from None
    print(json.dumps({"stats": dict(relay.stats)}), file=sys.stderr)
