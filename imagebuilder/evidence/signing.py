"""Signatures on evidence: an in-toto Statement (v1) about one image, in a DSSE envelope signed with Ed25519.

The Statement's subject is the image (its repository and manifest digest); its predicate is the evidence (a pass
record). DSSE signs the pre-authentication encoding of the payload type and the payload, so any DSSE
implementation verifies it (tests/unit/test_signing.py checks one with securesystemslib). A key is named by its
key id: the SHA-256 of its raw 32-byte public key, in hex.

Who signs: two roles, two keys. The step that ran the suite signs pass records and verdicts with
`IMAGEBUILDER_SIGNING_KEY`; the step that built an image signs its build provenance with `IMAGEBUILDER_BUILD_KEY`.
Who is trusted: exactly the keys the user names. With `--trust-key` (IMAGEBUILDER_TRUST_KEYS) or
`--trust-build-key` (IMAGEBUILDER_TRUST_BUILD_KEYS), those keys and the run's own explicit signing keys count, and
nothing else: a pass key also vouches for builds (whoever may say "this digest passed" may say "this is what was
built"), a build key never for passes. Only with none of them named (one machine, no configuration) does this
machine's own key (made on first use under the cache folder, `keys/local.pem`, mode 0600) sign and count for both,
and the run says which case it is in. A private key file must belong to this user and be readable by no one else.
A signature proves that a holder of a trusted key vouched for the predicate about that digest; it does not prove
the image could not lie to its own suite (docs/concepts/trust.md)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import InputError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
ENVELOPE_TYPE = "application/vnd.dsse.envelope.v1+json"
SIGNING_KEY_ENV = "IMAGEBUILDER_SIGNING_KEY"
BUILD_KEY_ENV = "IMAGEBUILDER_BUILD_KEY"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def key_label(keyid: str, source: str) -> str:
    return f"{keyid[:16]} ({source})"


@dataclass(frozen=True)
class PublicKey:
    key: Ed25519PublicKey
    source: str  # where it was trusted from (a file, "this machine's own key")

    @property
    def keyid(self) -> str:
        return key_id(self.key)

    def label(self) -> str:
        """Who a signature is from, as reports say it: the key's id (16 hex digits) and where it is trusted from."""
        return key_label(self.keyid, self.source)

    @property
    def raw(self) -> str:
        """The raw public key in hex (what securesystemslib's ed25519 keys hold)."""
        return self.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()

    def pem(self) -> bytes:
        return self.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    @classmethod
    def load(cls, path: Path) -> PublicKey:
        """A PEM public key file (or the public half of a PEM private key file)."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"trusted key {path}: cannot be read ({exc.strerror})") from None
        try:
            key = serialization.load_pem_public_key(data) if b"PUBLIC KEY" in data else \
                serialization.load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError):
            raise InputError(f"trusted key {path}: not a PEM Ed25519 key",
                             hint="make one with `imagebuilder keys new DIR`") from None
        if not isinstance(key, Ed25519PublicKey):
            raise InputError(f"trusted key {path}: not an Ed25519 key")
        return cls(key, str(path))


@dataclass(frozen=True)
class Signer:
    key: Ed25519PrivateKey
    source: str

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key(), self.source)

    def sign(self, payload: bytes, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
        """A DSSE envelope of the payload, signed by this key."""
        signature = self.key.sign(pae(payload_type, payload))
        return {"payload": base64.b64encode(payload).decode(), "payloadType": payload_type,
                "signatures": [{"keyid": self.public.keyid, "sig": base64.b64encode(signature).decode()}]}

    def private_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())

    @classmethod
    def generate(cls, source: str = "a new key") -> Signer:
        return cls(Ed25519PrivateKey.generate(), source)

    @classmethod
    def load(cls, path: Path) -> Signer:
        """A PEM private key file that belongs to this user and no one else may read or write (a key others can
        read signs for them too; one they could plant signs what they want)."""
        private_key_problem(path)
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except OSError as exc:
            raise InputError(f"signing key {path}: cannot be read ({exc.strerror})") from None
        except (ValueError, TypeError):
            raise InputError(f"signing key {path}: not an unencrypted PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise InputError(f"signing key {path}: not an Ed25519 key")
        return cls(key, str(path))

    @classmethod
    def local(cls, folder: Path) -> Signer:
        """This machine's own key under `folder` (the cache folder's keys/), made on first use, readable only
        by its owner."""
        path = folder / "local.pem"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            key = cls.generate()
            tmp = folder / f"local.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(key.private_pem())
            try:
                os.link(tmp, path)  # the first of two racing runs wins; the other reads its key
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        signer = cls.load(path)
        return Signer(signer.key, f"this machine's own key ({path})")


def private_key_problem(path: Path) -> None:
    """`InputError` naming the file when a private key is not this user's own, or others may read or change it."""
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(f"signing key {path}: cannot be read ({exc.strerror})") from None
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise InputError(f"signing key {path}: owned by user id {st.st_uid}, not by this user ({os.getuid()}): "
                         "whoever owns it can sign as this machine", hint="chown it, or make a new key")
    if st.st_mode & 0o077:
        raise InputError(f"signing key {path}: mode {st.st_mode & 0o777:04o} lets others read or change it",
                         hint=f"chmod 600 {path}")


class Rejected(Exception):
    """Why an envelope does not count: unsigned, tampered, signed by an untrusted key, or not about this image."""


@dataclass(frozen=True)
class Trust:
    """The keys whose signatures count."""

    keys: tuple[PublicKey, ...]

    @classmethod
    def of(cls, local: Signer | None, files: Iterable[Path] = ()) -> Trust:
        keys = [PublicKey.load(path) for path in files]
        if local is not None:
            keys.append(local.public)
        return cls(tuple({k.keyid: k for k in keys}.values()))

    def plus(self, other: Trust) -> Trust:
        """These keys and `other`'s (each once)."""
        return Trust(tuple({k.keyid: k for k in (*self.keys, *other.keys)}.values()))

    def ids(self) -> list[str]:
        return [k.keyid for k in self.keys]

    def open(self, envelope: Any, payload_type: str = PAYLOAD_TYPE) -> tuple[bytes, PublicKey]:
        """The payload of an envelope signed by a trusted key, and that key; `Rejected` saying why not."""
        if not isinstance(envelope, Mapping) or not isinstance(envelope.get("payload"), str):
            raise Rejected("not a DSSE envelope (unsigned)")
        if envelope.get("payloadType") != payload_type:
            raise Rejected(f"payload type {envelope.get('payloadType')!r}, not {payload_type}")
        try:
            payload = base64.b64decode(envelope["payload"], validate=True)
        except (binascii.Error, ValueError):
            raise Rejected("its payload is not base64") from None
        signatures = [s for s in envelope.get("signatures") or [] if isinstance(s, Mapping)]
        if not signatures:
            raise Rejected("unsigned")
        known = {k.keyid: k for k in self.keys}
        untrusted, bad = [], []
        for signature in signatures:  # every signature of a trusted key is tried: a bad one hides no good one
            key = known.get(str(signature.get("keyid")))
            if key is None:
                untrusted.append(str(signature.get("keyid"))[:16])
                continue
            try:
                key.key.verify(base64.b64decode(str(signature.get("sig")), validate=True), pae(payload_type, payload))
            except (InvalidSignature, binascii.Error, ValueError):
                bad.append(key)
                continue
            return payload, key
        if bad:
            raise Rejected(f"its signature by {bad[0].keyid[:16]} ({bad[0].source}) does not verify: the record was "
                           "changed after it was signed")
        raise Rejected(f"signed by an untrusted key ({', '.join(untrusted)}); trusted: "
                       f"{', '.join(k[:16] for k in self.ids()) or 'none'}")


ZERO_CONFIG = "single machine"  # no key named: this machine's own key signs and counts, for passes and builds
NAMED = "named keys"  # only the keys named (and the run's explicit signing keys) count


@dataclass(frozen=True)
class Keys:
    """Who signs this run's evidence and whose evidence counts, per role: `signer`/`trust` for pass records and
    verdicts, `builder`/`build_trust` for build provenance. A signer is None where this run has no key whose
    signature would count (keys are named, and no signing key for that role is given): it then writes nothing
    of that kind, and says so where it would have to."""

    signer: Signer | None
    trust: Trust
    builder: Signer | None = None
    build_trust: Trust = Trust(())
    case: str = ZERO_CONFIG

    @classmethod
    def load(cls, folder: Path, env: Mapping[str, str], trusted: Iterable[Path] = (),
             trusted_builders: Iterable[Path] = ()) -> Keys:
        """The keys of one run. Nothing named (`trusted`, `trusted_builders` empty): this machine's own key (made
        on first use in `folder`) signs both kinds, unless IMAGEBUILDER_SIGNING_KEY (both kinds) or
        IMAGEBUILDER_BUILD_KEY (builds) name others, and counts with them. Keys named: exactly those count, with
        the run's explicit signing keys; this machine's own key counts for nothing (a cache folder is no trust
        root)."""
        trusted, trusted_builders = list(trusted), list(trusted_builders)
        signer = Signer.load(Path(env[SIGNING_KEY_ENV])) if env.get(SIGNING_KEY_ENV) else None
        builder = Signer.load(Path(env[BUILD_KEY_ENV])) if env.get(BUILD_KEY_ENV) else None
        if not trusted and not trusted_builders:
            signer = signer or Signer.local(folder)
            builder = builder or signer
            trust = Trust.of(signer)
            return cls(signer, trust, builder, Trust.of(builder, ()).plus(trust), ZERO_CONFIG)
        trust = Trust.of(signer, trusted)
        return cls(signer, trust, builder, Trust.of(builder, trusted_builders).plus(trust), NAMED)

    def said(self) -> str:
        """Which case this run is in, as the run says it."""
        if self.case == ZERO_CONFIG:
            return (f"trust: {ZERO_CONFIG} (no --trust-key named): this machine's own key counts "
                    f"({self.signer.public.label() if self.signer else '?'})")
        signs = self.signer.public.label() if self.signer else "nothing (no IMAGEBUILDER_SIGNING_KEY)"
        return (f"trust: {NAMED}: passes count signed by {', '.join(k.label() for k in self.trust.keys) or 'none'}; "
                f"this run signs with {signs}")

    def writer(self, what: str) -> Signer:
        """The signer of pass records and verdicts; `InputError` saying why this run may not write `what`."""
        if self.signer is None:
            raise InputError(f"{what}: this run has no signing key whose records would count (keys are named with "
                             "--trust-key, and IMAGEBUILDER_SIGNING_KEY is not set)",
                             hint="give the job that writes records its key (IMAGEBUILDER_SIGNING_KEY) and name "
                             "its public half with --trust-key where the records are read")
        return self.signer


def statement(name: str, digest: str, predicate_type: str, predicate: Mapping[str, Any]) -> bytes:
    """An in-toto Statement v1 about the image `name@digest`."""
    algo, _, hexdigest = digest.partition(":")
    doc = {"_type": STATEMENT_TYPE, "subject": [{"name": name, "digest": {algo: hexdigest}}],
           "predicateType": predicate_type, "predicate": dict(predicate)}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def predicate_of(payload: bytes, digest: str, predicate_type: str) -> dict[str, Any]:
    """The predicate of a Statement that is about the image `digest`; `Rejected` otherwise."""
    try:
        doc = json.loads(payload)
    except ValueError:
        raise Rejected("its payload is not JSON") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE or doc.get("predicateType") != predicate_type:
        raise Rejected(f"not an in-toto Statement of {predicate_type}")
    algo, _, hexdigest = digest.partition(":")
    subjects = [s.get("digest") for s in doc.get("subject") or [] if isinstance(s, dict)]
    if not any(isinstance(d, dict) and d.get(algo) == hexdigest for d in subjects):
        raise Rejected(f"its subject is another image, not {digest}")
    predicate = doc.get("predicate")
    if not isinstance(predicate, dict):
        raise Rejected("its predicate is not an object")
    return predicate
