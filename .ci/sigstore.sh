#!/usr/bin/env bash
# An independent verifier of the Sigstore bundles imagebuilder writes, for the tests: Sigstore's own JavaScript
# libraries (@sigstore/verify, @sigstore/bundle), pinned by tests/sigstore/package-lock.json, on Debian's Node
# (nodejs, npm). Safe to run twice; does nothing when the pinned packages are installed.
set -euo pipefail
. "$(dirname "$0")/apt.sh"
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "sigstore: installing Debian's nodejs and npm"
  apt_install nodejs npm
fi
lock=tests/sigstore/package-lock.json
if [ -e tests/sigstore/node_modules/.package-lock.json ] && \
   node -e 'const a=require(process.argv[1]).packages,b=require(process.argv[2]).packages;
            for (const k of Object.keys(a)) if (k && (!b[k] || b[k].version !== a[k].version)) process.exit(1)' \
     "$PWD/$lock" "$PWD/tests/sigstore/node_modules/.package-lock.json"; then
  echo "sigstore: @sigstore/verify present (node $(node --version))"; exit 0
fi
npm ci --prefix tests/sigstore --no-audit --no-fund --loglevel=error >/dev/null
echo "sigstore: @sigstore/verify $(node -p 'require("./tests/sigstore/node_modules/@sigstore/verify/package.json").version') (node $(node --version))"
