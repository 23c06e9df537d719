"""Certificates made at test time with the `openssl` command: a CA, and a server certificate it signed.

`make_certificates(directory)` writes `ca.pem`, `server.pem` (for
`localhost` and `127.0.0.1`) and `server.key`, plus `other-ca.pem`, a CA that
signed nothing here (a client trusting only it must refuse the broker), and
`elsewhere.pem`/`.key`, signed by the CA for another name only. EC
P-256 keys: quick to make. Without `openssl` on the machine the tests that
need it skip, saying so — except under CI=true, where they must run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER_EXTENSIONS = """\
subjectAltName = {names}
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    elsewhere_cert: Path
    elsewhere_key: Path


def openssl_or_skip() -> str:
    found = shutil.which("openssl")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the openssl command is needed to make test certificates, and CI must run these tests")
        pytest.skip("the openssl command is not installed: cannot make test certificates")
    return found


def _run(openssl: str, *args: str, cwd: Path) -> None:
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(openssl: str, directory: Path, name: str) -> None:
    _run(openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=Kittiwake test {name}",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         cwd=directory)


def make_certificates(directory: Path) -> Certificates:
    openssl = openssl_or_skip()
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca(openssl, directory, "ca")
    _make_ca(openssl, directory, "other-ca")
    _make_server(openssl, directory, "server", "DNS:localhost, IP:127.0.0.1")
    _make_server(openssl, directory, "elsewhere", "DNS:elsewhere.example")
    return Certificates(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                        directory / "other-ca.pem", directory / "elsewhere.pem", directory / "elsewhere.key")


def _make_server(openssl: str, directory: Path, name: str, names: str) -> None:
    (directory / f"{name}.ext").write_text(SERVER_EXTENSIONS.format(names=names))
    _run(openssl, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=directory)
    _run(openssl, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)
