"""Signatures on evidence: an in-toto Statement (v1) about one image, in a DSSE envelope signed with Ed25519.

The Statement's subject is the image (its repository and manifest digest); its predicate is the evidence (a pass
record). DSSE signs the pre-authentication encoding of the payload type and the payload, so any DSSE
implementation verifies it (tests/unit/test_signing.py checks one with securesystemslib, and one the way sigstore-go
calls go-securesystemslib). A key is named by its key id, the SHA-256 of its raw 32-byte public key in hex, in
reports, tags and annotations. The `keyid` a signature carries is the key's SSH fingerprint (`SHA256:<base64>`,
what `ssh-keygen -lf` prints and what go-securesystemslib computes for the key sigstore-go hands it: cosign v3 and
Kyverno skip a signature whose keyid is another); a reader matches a signature by either form, and tries every
trusted key when the keyid is empty (what cosign's own signer writes).

Roles: each trusted key may sign only what its roles allow (`ROLES`): `build` build records, `gpu` passes and
verdicts of runs on GPUs, `cpu` passes of runs without GPUs, `publish` SBOMs, VSAs and untested records. A key is
named with its roles (`--trust-key gpu=keys/gpu.pub`, `cpu,publish=keys/hosted.pub`); a key named without roles may
sign everything, a build key (`--trust-build-key`) builds only. Whoever reads a signed statement asks the role of
what it says (`Rejected` when the key lacks it), so a CPU fleet's key never vouches for a GPU pass.

Who signs: the step that ran the suite signs pass records and verdicts (and publish its SBOMs, VSAs and untested
records) with `IMAGEBUILDER_SIGNING_KEY`; the step that built an image signs its build provenance with
`IMAGEBUILDER_BUILD_KEY` (each a PEM file's path, or the PEM itself, as a Kubernetes Secret hands it to a pod).
Who is trusted: exactly the keys the user names, with the roles they are named with. With `--trust-key`
(IMAGEBUILDER_TRUST_KEYS) or `--trust-build-key` (IMAGEBUILDER_TRUST_BUILD_KEYS), those keys and the run's own
explicit signing keys count (a signing key named nowhere counts for the pass roles, one named counts as named), and
nothing else. The two groups of roles are named apart: where no key is named for passes (`gpu`, `cpu`, `publish`),
or none for builds, this machine's own key (made on first use under the cache folder, `keys/local.pem`, mode 0600)
signs and counts for that group (one machine, no configuration), and the run says which case it is in. A
private key file must belong to this user and be readable by no one else.
A signature proves that a holder of a trusted key vouched for the predicate about that digest; it does not prove
the image could not lie to its own suite (docs/concepts/trust.md)."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
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
BUILD, GPU, CPU, PUBLISH = "build", "gpu", "cpu", "publish"
ROLES = (BUILD, GPU, CPU, PUBLISH)  # what a trusted key may sign: build records; GPU passes; CPU passes; the rest
PASS_ROLES = frozenset({GPU, CPU, PUBLISH})
EVERY_ROLE = frozenset(ROLES)
ROLE_MEANS = {BUILD: "build records (what an image was built on)",
              GPU: "passes and verdicts of runs on GPUs",
              CPU: "passes of runs without GPUs",
              PUBLISH: "SBOMs, VSAs and untested records"}
UNTRUSTED = "signed by an untrusted key"  # (what a rejection says when no trusted key signed it)
_SPEC = re.compile(r"(?P<roles>[a-z]+(?:,[a-z]+)*)=(?P<path>.+)")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def key_label(keyid: str, source: str) -> str:
    return f"{keyid[:16]} ({source})"


def fingerprint(public: Ed25519PublicKey) -> str:
    """The key's SSH SHA-256 fingerprint (`SHA256:` + unpadded base64 of the SHA-256 of its SSH wire form): the
    `keyid` our signatures carry, as go-securesystemslib computes it for a key (`ssh.FingerprintSHA256`)."""
    blob = base64.b64decode(public.public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def roles_problem(roles: Iterable[str]) -> str | None:
    """What is wrong with a list of roles, or None."""
    unknown = sorted(set(roles) - EVERY_ROLE)
    if unknown:
        return f"unknown role {unknown[0]!r} (roles: {', '.join(ROLES)})"
    return None


def named(spec: str | Path) -> tuple[frozenset[str], Path]:
    """A trusted key as a user names it: `FILE` (every role) or `ROLE[,ROLE...]=FILE`; `InputError` for a role that
    is none of `ROLES`."""
    text = str(spec)
    match = _SPEC.fullmatch(text)
    if match is None or not isinstance(spec, str):
        return EVERY_ROLE, Path(spec)
    roles = match.group("roles").split(",")
    problem = roles_problem(roles)
    if problem is not None:
        raise InputError(f"trusted key {text!r}: {problem}", hint="name a key as ROLE[,ROLE]=FILE, e.g. "
                         "gpu=keys/gpu.pub, or FILE alone for every role")
    return frozenset(roles), Path(match.group("path"))


@dataclass(frozen=True)
class PublicKey:
    """A key whose signatures count, for `roles` only (`allow` refuses the others), and where it was trusted from.
    Its id (`keyid`) and fingerprint are derived from the key, never read from what it signed."""

    key: Ed25519PublicKey
    source: str  # where it was trusted from (a file, "this machine's own key")
    roles: frozenset[str] = EVERY_ROLE  # what its signatures may vouch for (`ROLES`)

    @functools.cached_property
    def keyid(self) -> str:
        return key_id(self.key)

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    def may(self, role: str) -> bool:
        return role in self.roles

    def with_roles(self, roles: Iterable[str]) -> PublicKey:
        return PublicKey(self.key, self.source, frozenset(roles))

    def allow(self, role: str, what: str) -> None:
        """`Rejected` unless this key may sign `what`, a statement of `role`."""
        if role not in self.roles:
            raise Rejected(f"{what} is signed by {self.label()}, which is trusted for "
                           f"{', '.join(sorted(self.roles)) or 'nothing'}, not for {role} ({ROLE_MEANS[role]})")

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
    """A private key this run signs with (DSSE envelopes, `sign`), and where it came from. Loaded from a file only
    when no one else may read or change it (`load`); the key is never written into what it signs."""

    key: Ed25519PrivateKey
    source: str

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key(), self.source)

    def sign(self, payload: bytes, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
        """A DSSE envelope of the payload, signed by this key."""
        signature = self.key.sign(pae(payload_type, payload))
        return {"payload": base64.b64encode(payload).decode(), "payloadType": payload_type,
                "signatures": [{"keyid": self.public.fingerprint, "sig": base64.b64encode(signature).decode()}]}

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
    def of_env(cls, name: str, value: str) -> Signer:
        """The key a variable names: a PEM private key file (`load`), or the PEM itself, as a Kubernetes
        `secretKeyRef` hands a pod its key (no file whose owner or mode could let others sign)."""
        if not value.lstrip().startswith("-----BEGIN"):
            if "\n" in value or len(value) > 4096 or not Path(value).is_file():  # (never say what it holds)
                raise InputError(f"${name}: holds neither a PEM private key nor the path of a readable key file")
            return cls.load(Path(value))
        try:
            key = serialization.load_pem_private_key(value.strip().encode() + b"\n", password=None)
        except (ValueError, TypeError):
            raise InputError(f"${name}: holds PEM text that is not an unencrypted PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise InputError(f"${name}: not an Ed25519 key")
        return cls(key, f"${name}")

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
    """The keys whose signatures count, each with the roles it may vouch for (one key named twice: the roles of
    both). `open` gives an envelope's payload, and the key, only when a trusted key's signature verifies;
    otherwise `Rejected` says why. Whether that key's roles cover what the payload says is the reader's to ask
    (`PublicKey.allow`)."""

    keys: tuple[PublicKey, ...]

    @classmethod
    def of(cls, local: Signer | None, files: Iterable[Path | str] = ()) -> Trust:
        """The keys named (`named`: FILE, or ROLE[,ROLE]=FILE), and `local` (every role)."""
        keys = []
        for spec in files:
            roles, path = named(spec)
            keys.append(PublicKey.load(path).with_roles(roles))
        if local is not None:
            keys.append(local.public)
        return cls(()).plus(Trust(tuple(keys)))

    def plus(self, other: Trust) -> Trust:
        """These keys and `other`'s (each once, with the roles of both)."""
        merged: dict[str, PublicKey] = {}
        for k in (*self.keys, *other.keys):
            was = merged.get(k.keyid)
            merged[k.keyid] = k if was is None else was.with_roles(was.roles | k.roles)
        return Trust(tuple(merged.values()))

    def only(self, roles: Iterable[str]) -> Trust:
        """The keys that hold any of `roles`."""
        wanted = frozenset(roles)
        return Trust(tuple(k for k in self.keys if k.roles & wanted))

    def ids(self) -> list[str]:
        return [k.keyid for k in self.keys]

    def _candidates(self, keyid: str) -> list[PublicKey]:
        """The trusted keys a signature's keyid may be: the one it names (its fingerprint, or our hex key id), or
        every key when it names none."""
        if not keyid:
            return list(self.keys)
        return [k for k in self.keys if keyid in (k.fingerprint, k.keyid)]

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
        untrusted, bad = [], []
        for signature in signatures:  # every signature of a trusted key is tried: a bad one hides no good one
            keyid = str(signature.get("keyid") or "")
            candidates = self._candidates(keyid)
            if not candidates:
                untrusted.append(keyid if keyid.startswith("SHA256:") else keyid[:16])
                continue
            for key in candidates:
                try:
                    key.key.verify(base64.b64decode(str(signature.get("sig")), validate=True),
                                   pae(payload_type, payload))
                except (InvalidSignature, binascii.Error, ValueError):
                    if keyid:
                        bad.append(key)
                    continue
                return payload, key
            if not keyid:
                untrusted.append("no keyid, and no trusted key verifies it")
        if bad:
            raise Rejected(f"its signature by {bad[0].keyid[:16]} ({bad[0].source}) does not verify: the record was "
                           "changed after it was signed")
        raise Rejected(f"{UNTRUSTED} ({', '.join(untrusted)}); trusted: "
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
    def load(cls, folder: Path, env: Mapping[str, str], trusted: Iterable[Path | str] = (),
             trusted_builders: Iterable[Path | str] = ()) -> Keys:
        """The keys of one run. `trusted`: keys named as FILE (every role) or ROLE[,ROLE]=FILE (`named`);
        `trusted_builders`: build keys. Per group of roles (passes: gpu, cpu, publish; builds): where keys are
        named for it, exactly those count, with the run's own explicit signing key (IMAGEBUILDER_SIGNING_KEY for
        passes, IMAGEBUILDER_BUILD_KEY for builds; with the roles it is named with, else those of its group);
        where none is, this machine's own key (made on first use in `folder`), or the explicit key, signs and
        counts for that group. A build record is signed by IMAGEBUILDER_BUILD_KEY, else by the pass signer when
        its key may sign builds here."""
        given = [*(named(spec) for spec in trusted),
                 *((frozenset({BUILD}), Path(spec) if not isinstance(spec, Path) else spec)
                   for spec in trusted_builders)]
        keyring = Trust(()).plus(Trust(tuple(PublicKey.load(path).with_roles(roles) for roles, path in given)))
        pass_named = any(roles & PASS_ROLES for roles, _ in given)
        build_named = any(BUILD in roles for roles, _ in given)
        signer = Signer.of_env(SIGNING_KEY_ENV, env[SIGNING_KEY_ENV]) if env.get(SIGNING_KEY_ENV) else None
        builder = Signer.of_env(BUILD_KEY_ENV, env[BUILD_KEY_ENV]) if env.get(BUILD_KEY_ENV) else None
        if signer is None and not pass_named:
            signer = Signer.local(folder)
        own: list[PublicKey] = []  # the run's own keys, with the roles they count for where nothing names them
        if signer is not None:
            own.append(signer.public.with_roles(PASS_ROLES | (frozenset() if build_named else {BUILD})))
        if builder is not None:
            own.append(builder.public.with_roles({BUILD}))
        elif not build_named and signer is None:
            local = Signer.local(folder)
            own.append(local.public.with_roles({BUILD}))
            builder = local
        named_ids = {k.keyid for k in keyring.keys}
        keyring = keyring.plus(Trust(tuple(k for k in own if k.keyid not in named_ids)))
        if builder is None and signer is not None and \
                any(k.keyid == signer.public.keyid and k.may(BUILD) for k in keyring.keys):
            builder = signer
        case = ZERO_CONFIG if not given else NAMED
        return cls(signer, keyring.only(PASS_ROLES), builder, keyring.only({BUILD}), case)

    def said(self) -> str:
        """Which case this run is in, as the run says it."""
        if self.case == ZERO_CONFIG:
            return (f"trust: {ZERO_CONFIG} (no --trust-key named): this machine's own key counts "
                    f"({self.signer.public.label() if self.signer else '?'})")
        signs = self.signer.public.label() if self.signer else "nothing (no IMAGEBUILDER_SIGNING_KEY)"
        return (f"trust: {NAMED}: {'; '.join(self.roles_said()) or 'no key'}; this run signs with {signs}")

    def roles_said(self) -> list[str]:
        """Each role and the keys trusted for it."""
        keyring = self.trust.plus(self.build_trust)
        return [f"{role} by {', '.join(k.label() for k in keyring.keys if k.may(role)) or 'no key'}"
                for role in ROLES]

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
