// An independent check of a Sigstore bundle with a PEM public key and no transparency log, by Sigstore's own
// JavaScript libraries (@sigstore/bundle, @sigstore/verify; pinned in package.json, installed by .ci/sigstore.sh).
// Usage: node verify.js BUNDLE.json KEY.pem
// Exit 0 and print the verified in-toto Statement (JSON) on stdout; exit 1 and say why on stderr when refused.
'use strict';
const fs = require('fs');
const crypto = require('crypto');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

function main([bundlePath, keyPath]) {
  const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(bundlePath, 'utf8')));
  const key = crypto.createPublicKey(fs.readFileSync(keyPath));
  const root = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
  const trust = toTrustMaterial(root, () => ({ publicKey: key, validFor: () => true }));
  const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
  verifier.verify(toSignedEntity(bundle));
  process.stdout.write(bundle.content.dsseEnvelope.payload.toString('utf8') + '\n');
}

try {
  main(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`refused: ${err.code || err.name}: ${err.message}\n`);
  process.exit(1);
}
