# The daemon of a live team run, started inside the team's network namespace (tests/live/team.py): exactly
# what `harness daemon run` builds (a Daemon over TmuxTerminals read live from its agent registry, stopped
# cleanly by SIGTERM), with the two knobs a test wants: the desk runner looks at terminals every `--poll-ms`
# (200 instead of 500, so a turn on a notice is seen within a fifth of a second), and the journals are never
# checkpointed during a run (`--checkpoint-every`), so every delivery receipt stays readable in the journals.
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from harness.io.daemon import Daemon, limits_from_env, serve_until_signalled
from harness.io.desk_runner import RunnerTiming
from harness.io.journal import CheckpointPolicy
from harness.io.tmux import TmuxTerminals


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the daemon of a live team run")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--poll-ms", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=100_000)
    args = parser.parse_args(argv)
    daemon = Daemon(
        args.home,
        limits=limits_from_env(),
        terminals=TmuxTerminals.from_registry,
        runner_timing=RunnerTiming(poll_ms=args.poll_ms),
        checkpoint_policy=CheckpointPolicy(every=args.checkpoint_every),
        log=lambda line: print(f"harness daemon: {line}", file=sys.stderr, flush=True),
    )
    trio.run(serve_until_signalled, daemon)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
