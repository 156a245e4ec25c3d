"""Certificates for 127.0.0.1, made with `cryptography`, for fakes that speak TLS.

`make_certificate` makes a self-signed one: a client trusts it when `SSL_CERT_FILE` names the
certificate file (OpenSSL's default verify paths, which `ssl.create_default_context()` loads,
honour that variable). `make_private_ca` makes a CA and a server certificate it signed, as an
organisation's own CA does: a client trusts the server when it is given the CA's file.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Certificate:
    cert_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_path, self.key_path)
        return context


@dataclass(frozen=True)
class PrivateCa:
    #: The CA's certificate (PEM): what a client is told to trust.
    ca_path: Path
    #: A certificate for 127.0.0.1 that the CA signed, and its key.
    server: Certificate


def make_certificate(directory: Path) -> Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("127.0.0.1")
    certificate = _builder(name, name, key).sign(key, hashes.SHA256())
    return _write(directory, "cert.pem", "key.pem", certificate, key)


def make_private_ca(directory: Path, name: str = "Octos Test CA") -> PrivateCa:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(name)
    ca = _builder(ca_name, ca_name, ca_key).sign(ca_key, hashes.SHA256())
    ca_path = _write(directory, "ca.pem", "ca-key.pem", ca, ca_key).cert_path
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _builder(_name("127.0.0.1"), ca_name, server_key, ca=False).sign(
        ca_key, hashes.SHA256()
    )
    return PrivateCa(ca_path, _write(directory, "server.pem", "server-key.pem", server, server_key))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, *, ca: bool = True
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    )


def _write(
    directory: Path,
    cert_name: str,
    key_name: str,
    certificate: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
) -> Certificate:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / cert_name, directory / key_name
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Certificate(cert_path, key_path)
