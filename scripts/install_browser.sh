#!/usr/bin/env bash
# The web page tests drive Debian's Chromium over the DevTools protocol. Installs it once; later runs only
# check. CI runs as root with apt; elsewhere it says what to install.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install_browser: run as root, or: sudo apt-get install -y chromium chromium-driver" >&2
  exit 1
fi
echo "install_browser: installing Debian's chromium (once)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
