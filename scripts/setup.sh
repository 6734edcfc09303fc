#!/usr/bin/env bash
# Sets up a fresh machine for harness: a private virtualenv with the pinned packages, the project installed
# editable into it. Idempotent: a second run only checks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=.venv/.harness-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # The build backend's warnings (an editable install's advice) are noise to a user: shown only on failure.
  log=.venv/pip-install.log
  if ! { .venv/bin/python -m pip install --quiet --upgrade pip \
      && .venv/bin/python -m pip install --quiet -e ".[test]"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: installing the packages failed (log: $log)" >&2
    exit 1
  fi
  touch "$stamp"
fi
