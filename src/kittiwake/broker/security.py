"""The broker's security settings, and what it says about them when it starts.

`SecurityConfig` rides in `BrokerConfig.security`: the auth file (users,
tokens, rights: `kittiwake.broker.users`), the TLS certificate and key, the
TLS port, and whether the plaintext port is open at all. Validated on
construction like the rest of the configuration.

Defaults keep a broker private: it listens on 127.0.0.1 unless `--host`
says otherwise, and `exposure_warnings` makes it say so — and warn loudly
when it listens beyond the loopback without an auth file (anyone who can
reach the port may then read and change every queue) or with tokens sent in
plaintext.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_TLS_PORT = 7371
DEFAULT_AUTH_TIMEOUT_SECS = 10.0


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """Authentication, TLS, and which listeners are open."""

    auth_file: str | None = None  # None: every client may do everything
    tls_cert: str | None = None  # PEM certificate chain; with tls_key, opens the TLS port
    tls_key: str | None = None
    tls_port: int = DEFAULT_TLS_PORT  # 0 picks a free port
    plaintext: bool = True  # False: only the TLS port is open
    auth_timeout_secs: float = DEFAULT_AUTH_TIMEOUT_SECS  # a connection not authenticated by then is closed

    def __post_init__(self) -> None:
        for name in ("auth_file", "tls_cert", "tls_key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty path")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if isinstance(self.tls_port, bool) or not isinstance(self.tls_port, int) or not 0 <= self.tls_port <= 65535:
            raise ValueError(f"tls_port must be in [0, 65535], got {self.tls_port!r}")
        timeout = self.auth_timeout_secs
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise ValueError(f"auth_timeout_secs must be in (0, 3600], got {timeout!r}")
        if not self.plaintext and not self.tls:
            raise ValueError("the plaintext port can only be closed when TLS is on (tls_cert and tls_key)")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


def is_loopback(host: str) -> bool:
    """Whether `host` reaches only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def exposure_note(host: str, security: SecurityConfig) -> str:
    """How the start-up line describes who can connect."""
    auth = f"auth from {security.auth_file}" if security.auth_file else "no auth"
    where = "loopback only" if is_loopback(host) else "reachable from the network"
    return f"{where}, {auth}"


def exposure_warnings(host: str, security: SecurityConfig) -> list[str]:
    """Warnings for a broker that others may reach without the protection they would expect."""
    warnings = []
    if not is_loopback(host):
        if security.auth_file is None:
            warnings.append(
                f"listening on {host} without --auth-file: anyone who can reach this address can read, "
                "change and delete every queue"
            )
        elif security.plaintext:
            warnings.append(
                f"listening on {host} with the plaintext port open: tokens and task data cross the network "
                "unencrypted (use --tls-cert/--tls-key and --no-plaintext)"
            )
    return warnings
