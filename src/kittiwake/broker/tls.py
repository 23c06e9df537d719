"""The broker's TLS: a server `ssl.SSLContext` from a certificate chain and its key.

TLS 1.2 at least, the `ssl` module's default ciphers, no compression. The certificate file may hold the whole chain (leaf first). Client
certificates are not asked for: clients authenticate with a token
(`kittiwake.broker.auth`) over the encrypted connection.
"""

from __future__ import annotations

import ssl

HANDSHAKE_TIMEOUT_SECS = 10.0  # a client that connects and says nothing must not hold a slot for long


class TlsSetupError(ValueError):
    """The certificate or key cannot be used; the message names the file and the reason."""


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context for `cert_file` (PEM chain) and `key_file` (PEM private key)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    try:
        context.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as exc:
        raise TlsSetupError(f"TLS certificate or key not found: {exc.filename}") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsSetupError(f"cannot use TLS certificate {cert_file!r} with key {key_file!r}: {exc}") from None
    return context
