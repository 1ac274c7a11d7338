// An independent check of Sigstore bundles with a PEM public key and no transparency log, by Sigstore's own
// JavaScript libraries (@sigstore/bundle, @sigstore/verify; pinned in package.json, installed by .ci/sigstore.sh).
// Usage: node verify.js KEY.pem BUNDLE.json...
// Exit 0 and print the verified in-toto Statements (a JSON array) on stdout; exit 1 and say which bundle was
// refused, and why, on stderr.
'use strict';
const fs = require('fs');
const crypto = require('crypto');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

function verify(verifier, path) {
  const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(path, 'utf8')));
  verifier.verify(toSignedEntity(bundle));
  return JSON.parse(bundle.content.dsseEnvelope.payload.toString('utf8'));
}

const [keyPath, ...bundles] = process.argv.slice(2);
const key = crypto.createPublicKey(fs.readFileSync(keyPath));
const root = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
const trust = toTrustMaterial(root, () => ({ publicKey: key, validFor: () => true }));
const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
const statements = [];
for (const path of bundles) {
  try {
    statements.push(verify(verifier, path));
  } catch (err) {
    process.stderr.write(`refused ${path}: ${err.code || err.name}: ${err.message}\n`);
    process.exit(1);
  }
}
process.stdout.write(JSON.stringify(statements) + '\n');
