"""A CA bundle: PEM certificates and nothing else.

`build.ca_bundle` (or $PIP_CERT, $REQUESTS_CA_BUNDLE, $SSL_CERT_FILE) names a file that is copied into every
image, so it could name anything readable: a private key, ~/.netrc, a Docker config. Only X.509 certificates
in PEM blocks count; a bundle with none, with a block of another kind (a key), or with a certificate that does
not parse is refused before anything builds, and what goes into an image is each certificate written anew from
what parsed (the text between and inside blocks, such as the titles in curl's cacert.pem, stays behind). Pure; no I/O.
"""

from __future__ import annotations

import re
import warnings

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.utils import CryptographyDeprecationWarning

MAX_BYTES = 4 << 20  # Debian's whole bundle is about 220 KB
_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)


class NotABundle(ValueError):
    """Why a file is not a CA bundle."""


def certificates(data: bytes) -> bytes:
    """The certificate blocks of a bundle, one after another; `NotABundle` saying why when it is not one."""
    if len(data) > MAX_BYTES:
        raise NotABundle(f"it is {len(data)} bytes; a CA bundle has at most {MAX_BYTES}")
    if b"-----BEGIN" in _BLOCK.sub(b"", data):
        raise NotABundle("it holds a PEM block that does not end")
    blocks = [(match.group(1).decode(), match.group(0)) for match in _BLOCK.finditer(data)]
    other = sorted({kind for kind, _ in blocks if kind != "CERTIFICATE"})
    if other:
        raise NotABundle(f"it holds a {other[0]} block; only certificates may go into an image")
    if not blocks:
        raise NotABundle("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    out = []
    for number, (_, block) in enumerate(blocks, 1):
        try:
            with warnings.catch_warnings():  # (old roots in Debian's bundle have serials RFC 5280 now disallows)
                warnings.simplefilter("ignore", CryptographyDeprecationWarning)
                out.append(x509.load_pem_x509_certificate(block).public_bytes(serialization.Encoding.PEM))
        except ValueError as exc:
            raise NotABundle(f"certificate {number} does not parse ({exc})") from None
    return b"".join(out)  # written anew from what parsed: nothing else of the block goes along
