#!/usr/bin/env bash
# Debian's chromium for the report page's browser tests (playwright drives it; it never downloads a browser).
# Safe to run twice; does nothing when /usr/bin/chromium is there.
set -euo pipefail
. "$(dirname "$0")/apt.sh"
if [ -x /usr/bin/chromium ]; then echo "browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"; exit 0; fi
echo "browser: installing Debian's chromium"
apt_install chromium
echo "browser: $(/usr/bin/chromium --version)"
