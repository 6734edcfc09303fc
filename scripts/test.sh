#!/usr/bin/env bash
# The one test command: set up, lint, type-check strictly, then run the whole suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
bash scripts/install_browser.sh
export PATH="$root/.venv/bin:$PATH"
echo "== ruff"
ruff check core io cli models tests scripts
echo "== mypy --strict"
bash scripts/typecheck.sh
echo "== pytest"
python -m pytest "$@"
