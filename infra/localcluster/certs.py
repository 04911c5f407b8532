"""The local cluster's keys and certificates: one CA, the API server's serving certificate (for 127.0.0.1 and the
`kubernetes` Service's names), the service-account signing key, an admin client certificate (system:masters) for
the kubeconfig the components and the user share, and the front proxy's client certificate, with which the API
server's aggregator calls an aggregated API (Kueue's visibility API) on a user's behalf. Made at each start of the
control plane."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = datetime.timedelta(days=365)
SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
SERVER_IPS = ("127.0.0.1", "10.96.0.1")
# The name an aggregated API server accepts the user headers of (kube-apiserver --requestheader-allowed-names).
FRONT_PROXY = "front-proxy-client"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if dns or ips:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _name(common: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def serving_pair(
    folder: Path,
    name: str,
    ca_cert: Path,
    ca_key: Path,
    ips: tuple[str, ...] = ("127.0.0.1",),
    dns: tuple[str, ...] = (),
) -> None:
    """`<name>.crt` and `<name>.key` in `folder`: a serving certificate for `ips` and `dns` names, signed by the CA."""
    ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = _key()
    cert = _cert(_name(name), key, (ca.subject, signer), server=True, dns=("localhost", *dns), ips=ips)
    _write(folder / f"{name}.key", _pem_key(key))
    _write(folder / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)


def make(folder: Path) -> None:
    """Every key and certificate of one cluster, in `folder` (ca, apiserver, admin, service-account)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("platform-local-ca")
    ca = _cert(ca_name, ca_key, None, ca=True)
    _write(folder / "ca.key", _pem_key(ca_key))
    _write(folder / "ca.crt", ca.public_bytes(serialization.Encoding.PEM), 0o644)
    server_key = _key()
    server = _cert(
        _name("kube-apiserver"), server_key, (ca_name, ca_key), server=True, dns=SERVER_NAMES, ips=SERVER_IPS
    )
    _write(folder / "apiserver.key", _pem_key(server_key))
    _write(folder / "apiserver.crt", server.public_bytes(serialization.Encoding.PEM), 0o644)
    admin_key = _key()
    admin = _cert(_name("platform-admin", "system:masters"), admin_key, (ca_name, ca_key))
    _write(folder / "admin.key", _pem_key(admin_key))
    _write(folder / "admin.crt", admin.public_bytes(serialization.Encoding.PEM), 0o644)
    proxy_key = _key()
    proxy = _cert(_name(FRONT_PROXY), proxy_key, (ca_name, ca_key))
    _write(folder / "front-proxy-client.key", _pem_key(proxy_key))
    _write(folder / "front-proxy-client.crt", proxy.public_bytes(serialization.Encoding.PEM), 0o644)
    sa_key = _key()
    _write(folder / "sa.key", _pem_key(sa_key))
    public = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write(folder / "sa.pub", public, 0o644)
