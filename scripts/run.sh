#!/usr/bin/env bash
# The one run command: set up, then run the main job on its embedded default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
exec .venv/bin/harness demo "$@"
