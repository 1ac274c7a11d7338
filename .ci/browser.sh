#!/usr/bin/env bash
# Debian's chromium for the report page's browser tests (playwright drives it; it never downloads a browser).
# Safe to run twice; does nothing when /usr/bin/chromium is there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then echo "browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"; exit 0; fi
echo "browser: installing Debian's chromium"
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null
echo "browser: $(/usr/bin/chromium --version)"
