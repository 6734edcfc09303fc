#!/usr/bin/env bash
# The one run command: set up, then run the main job on its embedded default: the machine daemon, in the
# foreground, on the default data directory (Ctrl-C or SIGTERM stops it cleanly). `harness demo` shows it
# at work in a minute; `harness --help` lists the rest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
echo "harness daemon: starting on the default data directory (Ctrl-C stops it; try '.venv/bin/harness demo')"
exec .venv/bin/harness daemon run "$@"
