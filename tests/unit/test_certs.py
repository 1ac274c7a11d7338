"""A CA bundle is copied into every image: only PEM certificates count, and only they are copied."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID

from imagebuilder.input.certs import NotABundle, certificates


def pem_certificate(name: str = "imagebuilder test CA") -> bytes:
    """A self-signed certificate, PEM."""
    key = ed25519.Ed25519PrivateKey.generate()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .sign(key, None))
    return cert.public_bytes(serialization.Encoding.PEM)


def private_key() -> bytes:
    return ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def test_certificates_alone_are_kept_and_the_text_between_them_stays_behind() -> None:
    one, two = pem_certificate("one"), pem_certificate("two")
    curl_style = b"## Bundle of CA Root Certificates\n\nOne Root CA\n===========\n" + one + b"\nTwo\n===\n" + two
    assert certificates(curl_style) == one + two
    assert b"Bundle" not in certificates(curl_style)


@pytest.mark.parametrize(("data", "why"), [
    (b"machine pypi.example login me password hunter2\n", "no PEM certificate"),  # ~/.netrc
    (b'{"auths": {"registry.example": {"auth": "bWU6aHVudGVyMg=="}}}', "no PEM certificate"),  # a Docker config
    (b"-----BEGIN CERTIFICATE-----\n", "does not end"),
    (b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n", "does not parse"),
])
def test_a_file_that_is_not_a_bundle_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(NotABundle, match=why):
        certificates(data)


def test_a_private_key_beside_a_certificate_is_refused() -> None:
    """A key appended to a bundle (or a combined cert+key file) would be copied into every image."""
    with pytest.raises(NotABundle, match="PRIVATE KEY block"):
        certificates(pem_certificate() + private_key())
