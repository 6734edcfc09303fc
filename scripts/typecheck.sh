#!/usr/bin/env bash
# mypy cannot follow setuptools' editable finder, so it checks a throw-away tree of symlinks that lays the
# top-level folders out as the `harness` namespace they are installed as.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/harness"
for part in core io cli models; do ln -s "$root/$part" "$tree/harness/$part"; done
cd "$tree"
"$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" -p harness
