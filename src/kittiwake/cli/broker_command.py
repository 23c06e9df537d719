"""`kittiwake broker`: run a broker until SIGTERM or SIGINT, on the embedded SQLite store
(`--data DIR`, the default) or on the store a URL names (`--store sqlite://DIR` or
`--store postgresql://…`, `kittiwake.store.location`).

Prints one line to stdout once it listens — `kittiwake broker listening on
HOST:PORT [tls_port=N] [udp_port=N] [sqs_port=N] [http_port=N] [plaintext=off] auth=on|off data=DIR|store=URL
durability=MODE` —
and logs to stderr. HOST:PORT is the plaintext port, or the TLS port when
the plaintext port is off. A store that cannot be opened (a server down, a bad
URL, a schema of a newer version: SCHEMA_TOO_NEW) is one line on stderr and exit status
1; a Kittiwake error's line carries its code (`cannot start: CODE: message`).

This is the composition root of a broker process: the broker itself names no
face, so the options of each face (`--udp-port`, `--sqs-port`, `--http-port`
and theirs) build the faces here (`build_faces`), and the broker starts them.
A new face is its module plus its options and one line in `build_faces`.
Request extensions are built the same way (`build_extensions`): `--cluster FILE
--node NAME` makes the broker a node of a cluster (`kittiwake.cluster.node`); a
bad map or a node the map does not name, or a node that would not listen where
the map says, is a usage error (exit status 2), and a store of another node is
one line on stderr and exit status 1 (CLUSTER_IDENTITY). A node that serves
`--http-port` too gets the dashboard's cluster page, its source built here over
the node (`kittiwake.cluster.dashboard`), so the dashboard imports nothing of
the cluster.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from kittiwake import errors
from kittiwake.broker.security import DEFAULT_AUTH_TIMEOUT_SECS, DEFAULT_TLS_PORT, SecurityConfig
from kittiwake.broker.config import (
    DEFAULT_DATA_DIR,
    DEFAULT_FRAME_TIMEOUT_SECS,
    DEFAULT_IDLE_TIMEOUT_SECS,
    DEFAULT_MAX_BUFFERED_MB,
    DEFAULT_MAX_CONNECTIONS_PER_USER,
    DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS,
    DEFAULT_PORT,
    BrokerConfig,
)
from kittiwake.broker.extensions import RequestExtension
from kittiwake.broker.faces import Face
from kittiwake.constants import DEFAULT_METRICS_QUEUE_SERIES, MAX_METRICS_QUEUE_SERIES
from kittiwake.protocol import DEFAULT_MAX_FRAME

if TYPE_CHECKING:
    from kittiwake.observe.cluster_source import ClusterSource


def build_faces(
    *, udp_port: int | None = None, sqs_port: int | None = None, http_port: int | None = None,
    metrics_queue_series: int = DEFAULT_METRICS_QUEUE_SERIES, http_host_names: tuple[str, ...] = (),
    extensions: Sequence[RequestExtension] = (),
) -> list[Face]:
    """The faces the options ask for, in the order their ports are listed; each imported only when on.
    On a cluster node (a `ClusterNode` among `extensions`) the dashboard gets its cluster page."""
    faces: list[Face] = []
    host_names = None
    if sqs_port is not None or http_port is not None:
        from kittiwake.broker.http_hosts import HostNames

        host_names = HostNames(http_host_names)
    if udp_port is not None:
        from kittiwake.broker.udp.face import UdpFace

        faces.append(UdpFace(udp_port))
    if sqs_port is not None:
        from kittiwake.sqs.face import SqsFace

        faces.append(SqsFace(sqs_port, host_names=host_names))
    if http_port is not None:
        from kittiwake.observe.face import ObserveFace

        faces.append(ObserveFace(http_port, metrics_queue_series=metrics_queue_series, host_names=host_names,
                                 cluster=_cluster_page(extensions)))
    return faces


def _cluster_page(extensions: Sequence[RequestExtension]) -> ClusterSource | None:
    """The source of the dashboard's cluster page when one of `extensions` is a cluster node."""
    if not extensions:
        return None
    from kittiwake.cluster.dashboard import NodeDashboard
    from kittiwake.cluster.node import ClusterNode

    node = next((extension for extension in extensions if isinstance(extension, ClusterNode)), None)
    return NodeDashboard(node) if node is not None else None


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def build_extensions(
    *, cluster_file: str | None, node_name: str | None, host: str, port: int,
    cluster_user: str | None = None, cluster_token: str | None = None, cluster_ca: str | None = None,
    tls_cert: str | None = None, tls_port: int | None = None, plaintext: bool = True,
) -> list[RequestExtension]:
    """The request extensions the options ask for: a cluster node with --cluster and --node.

    The map must name the node, and the node must listen where the map says: the same port — its
    --port, or its --tls-port (with --tls-cert) on a map that says `tls = true` — and the same host
    unless --host is a wildcard (0.0.0.0, ::), which listens on the map's address too (then only the
    port is checked). A host name in the map is not resolved: --host must be written the same way.
    --cluster-ca goes with a TLS map only. Anything wrong is a usage error (exit status 2)."""
    if cluster_file is None:
        if node_name is not None or cluster_user is not None or cluster_token is not None or cluster_ca is not None:
            raise click.UsageError("--node, --cluster-user, --cluster-token and --cluster-ca go with --cluster FILE")
        return []
    if node_name is None:
        raise click.UsageError("--cluster needs --node NAME: which node of the map this broker is")
    if (cluster_user is None) != (cluster_token is None):
        raise click.UsageError("give --cluster-user and --cluster-token together")
    from kittiwake.cluster.cluster_map import ClusterMap
    from kittiwake.cluster.node import ClusterNode

    try:
        with open(cluster_file, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {cluster_file}: {exc.strerror or exc}", param_hint="--cluster") from None
    try:
        cluster = ClusterMap.from_toml(text)
        address = cluster.address_of(node_name)
    except errors.BadRequest as exc:
        raise click.BadParameter(f"{cluster_file}: {exc.message}", param_hint="--cluster") from None
    if cluster.tls:
        if tls_cert is None:
            raise click.UsageError(f"{cluster_file} says tls = true: its nodes listen for TLS at the map's addresses, "
                                   "so give --tls-cert and --tls-key, and --tls-port the map's port")
        listens, option = tls_port, "--tls-port"
    else:
        if cluster_ca is not None:
            raise click.UsageError(f"--cluster-ca verifies the peers' TLS certificates, but {cluster_file} lists "
                                   "plaintext ports (write tls = true in it and list the nodes' TLS ports)")
        if not plaintext:
            raise click.UsageError(f"{cluster_file} lists plaintext ports (no tls = true), but --no-plaintext closes "
                                   "this node's: run the cluster on a map with tls = true that lists the TLS ports")
        listens, option = port, "--port"
    if listens != address.port or (host not in WILDCARD_HOSTS and host.lower() != address.host.lower()):
        raise click.BadParameter(
            f"node {node_name!r} listens at {address} in {cluster_file}, but this broker would listen on "
            f"{host}:{listens}: give --host {address.host} {option} {address.port} "
            f"(or --host 0.0.0.0 {option} {address.port})",
            param_hint=f"--host/{option}")
    credentials = (cluster_user, cluster_token) if cluster_user is not None and cluster_token is not None else None
    return [ClusterNode(cluster, node_name, credentials=credentials, ca_file=cluster_ca)]


@click.command("broker")
@click.option("--data", "data_dir", default=DEFAULT_DATA_DIR, show_default=True, type=click.Path(file_okay=False),
              help="Directory of the SQLite store; created if missing.")
@click.option("--store", "store_url", metavar="URL",
              help="The store, instead of --data: sqlite://DIR, or postgresql://[USER@]HOST[:PORT]/DB"
              "[?schema=NAME][&brokers=many] (tables in schema NAME, default kittiwake; created or upgraded "
              "at start; brokers=many on every broker of a schema to run several on it). "
              "Put a password in ~/.pgpass or $PGPASSWORD rather than here.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on: this machine only by default; 0.0.0.0 for every interface "
              "(then use --auth-file).")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port; 0 picks a free one (the listening line says which).")
@click.option("--durability", default="fsync", show_default=True, type=click.Choice(["fsync", "os"]),
              help="fsync: an ok reply survives power loss. os: it survives a broker crash, not a power loss. "
              "On PostgreSQL: synchronous_commit on (or the server's stricter setting) / off.")
@click.option("--commit-log", default="off", show_default=True, type=click.Choice(["on", "off"]),
              envvar="KITTIWAKE_COMMIT_LOG",
              help="on: each pass is one record appended to DIR/commit.log and synced (the reply waits for that "
              "only); the SQLite database follows in batches where what cancelled out is never written. "
              "SQLite store only. Also $KITTIWAKE_COMMIT_LOG.")
@click.option("--checkpoint-secs", default=1.0, show_default=True, type=click.FloatRange(0.0, 3600.0),
              help="With --commit-log on: the database catches up with the log (and the log is emptied) at "
              "least this often, or sooner after 50,000 mutations or 64 MiB of log.")
@click.option("--max-frame", default=DEFAULT_MAX_FRAME, show_default=True, type=click.IntRange(64 * 1024, (1 << 32) - 1),
              help="Largest frame accepted, in bytes; a bigger length prefix closes the connection.")
@click.option("--max-connections", default=10_000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Connections of all ports together (binary, TLS, HTTP); beyond it a binary client gets "
              "TOO_MANY_CONNECTIONS and an HTTP one 503. Lowered at start to what the open-files limit allows.")
@click.option("--max-connections-per-user", default=DEFAULT_MAX_CONNECTIONS_PER_USER, show_default=True,
              type=click.IntRange(0, 1_000_000),
              help="With --auth-file: connections one user may hold; beyond it the user's auth gets "
              "TOO_MANY_CONNECTIONS. 0: no cap but --max-connections.")
@click.option("--max-unauthenticated-per-address", default=DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS,
              show_default=True, type=click.IntRange(0, 1_000_000),
              help="With --auth-file: connections from one address no user is known for (binary ones before "
              "their auth, HTTP ones before a request with valid credentials); beyond it TOO_MANY_CONNECTIONS "
              "or HTTP 503. 0: no cap.")
@click.option("--cache-mb", default=256, show_default=True, type=click.IntRange(1, 1 << 20),
              help="Memory for the heads of queues kept in memory, in MiB.")
@click.option("--head-tasks", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Tasks per queue loaded into memory ahead of leases.")
@click.option("--sqlite-cache-mb", default=64, show_default=True, type=click.IntRange(1, 1 << 20),
              help="SQLite page cache, in MiB.")
@click.option("--auth-file", type=click.Path(dir_okay=False),
              help="Users, hashed tokens and rights (written by `kittiwake auth add-user`). Clients must then "
              "authenticate: kw://USER:TOKEN@HOST:PORT. Re-read when it changes.")
@click.option("--auth-timeout-secs", default=DEFAULT_AUTH_TIMEOUT_SECS, show_default=True,
              type=click.FloatRange(0, 3600, min_open=True),
              help="With --auth-file: a connection that has not authenticated this long after connecting is closed.")
@click.option("--tls-cert", type=click.Path(dir_okay=False),
              help="PEM certificate chain: also listen for TLS (kws://) on --tls-port. Needs --tls-key.")
@click.option("--tls-key", type=click.Path(dir_okay=False), help="PEM private key of --tls-cert.")
@click.option("--tls-port", default=DEFAULT_TLS_PORT, show_default=True, type=click.IntRange(0, 65535),
              help="TLS port; 0 picks a free one (the listening line says which).")
@click.option("--plaintext/--no-plaintext", default=True, show_default=True,
              help="Whether the plaintext port (--port) is open; --no-plaintext needs TLS.")
@click.option("--frame-timeout", "frame_timeout_secs", default=DEFAULT_FRAME_TIMEOUT_SECS, show_default=True,
              type=float, help="Seconds a frame may take to arrive whole once started; then FRAME_TIMEOUT and close.")
@click.option("--idle-timeout", "idle_timeout_secs", default=DEFAULT_IDLE_TIMEOUT_SECS, show_default=True,
              type=float, help="Seconds a connection may have nothing in flight (a parked long-poll is in flight); "
                               "then IDLE_TIMEOUT and close. 0: never.")
@click.option("--max-buffered-mb", default=DEFAULT_MAX_BUFFERED_MB, show_default=True, type=int,
              help="MiB of unfinished requests (binary frames and HTTP bodies) held across all connections; beyond "
                   "it the broker stops reading from connections in the middle of one until others complete (at least "
                   "one max frame).")
@click.option("--udp-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve kwu:// (UDP datagrams) on this port; 0 picks a free one. Off by default.")
@click.option("--sqs-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve the SQS API (AWS JSON 1.0 over HTTP: boto3, the AWS CLI) on this port; "
              "0 picks a free one. Off by default. With --auth-file, requests must be signed with a user's SQS "
              "secret (kittiwake auth sqs-secret USER); without, no signature is checked.")
@click.option("--http-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve the dashboard (/), its JSON API (/api/...) and Prometheus metrics (/metrics) on this "
              "port; 0 picks a free one. Off by default. With --auth-file, every path but /healthz needs a user's "
              "token (the dashboard asks for it; scrapers send it as HTTP basic auth).")
@click.option("--metrics-queue-series", type=click.IntRange(0, MAX_METRICS_QUEUE_SERIES),
              default=DEFAULT_METRICS_QUEUE_SERIES, show_default=True,
              help="With --http-port: how many queues get series of their own in /metrics (the first to be active, "
              "and the largest for the sizes); the others are added up in queue=\"other\".")
@click.option("--http-host-name", "http_host_names", multiple=True, metavar="NAME",
              help="A host name the HTTP ports (--sqs-port, --http-port) answer to, besides IP addresses and "
              "localhost; repeat for more. Requests for any other name get 421 (a guard against DNS rebinding).")
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Serve as a node of the cluster this map describes (TOML: [nodes] name = \"host:port\", ...; "
              "tls = true: the addresses are TLS ports). "
              "Needs --node. The node records its name and the map's epoch in its store and refuses a store of "
              "another node.")
@click.option("--node", "node_name", metavar="NAME",
              help="With --cluster: this broker's node name in the map. It must listen where the map says "
              "(--host and --port, or --tls-port on a TLS map; with --host 0.0.0.0 or :: only the port is checked).")
@click.option("--cluster-user", metavar="USER", envvar="KITTIWAKE_CLUSTER_USER",
              help="With --cluster, when the nodes run with --auth-file: the user this node announces to its peers "
              "as (it needs admin on '*'). Also $KITTIWAKE_CLUSTER_USER.")
@click.option("--cluster-token", metavar="TOKEN", envvar="KITTIWAKE_CLUSTER_TOKEN",
              help="The token of --cluster-user; better given as $KITTIWAKE_CLUSTER_TOKEN than on the command line.")
@click.option("--cluster-ca", type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="With --cluster on a map that says tls = true: the CA (PEM) to verify the peers' certificates "
              "with; by default the system's CAs.")
@click.pass_context
def broker(
    ctx: click.Context,
    data_dir: str,
    store_url: str | None,
    host: str,
    port: int,
    durability: str,
    commit_log: str,
    checkpoint_secs: float,
    max_frame: int,
    max_connections: int,
    max_connections_per_user: int,
    max_unauthenticated_per_address: int,
    cache_mb: int,
    head_tasks: int,
    sqlite_cache_mb: int,
    auth_file: str | None,
    auth_timeout_secs: float,
    tls_cert: str | None,
    tls_key: str | None,
    tls_port: int,
    plaintext: bool,
    frame_timeout_secs: float,
    idle_timeout_secs: float,
    max_buffered_mb: int,
    udp_port: int | None,
    sqs_port: int | None,
    http_port: int | None,
    metrics_queue_series: int,
    http_host_names: tuple[str, ...],
    cluster_file: str | None,
    node_name: str | None,
    cluster_user: str | None,
    cluster_token: str | None,
    cluster_ca: str | None,
) -> None:
    """Run a broker on the embedded store (or --store) until SIGTERM or SIGINT."""
    from kittiwake.broker.server import run_broker

    extensions = build_extensions(cluster_file=cluster_file, node_name=node_name, host=host, port=port,
                                  cluster_user=cluster_user, cluster_token=cluster_token, cluster_ca=cluster_ca,
                                  tls_cert=tls_cert, tls_port=tls_port, plaintext=plaintext)
    if store_url is not None and ctx.get_parameter_source("data_dir") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give --data DIR or --store URL, not both")
    try:
        config = BrokerConfig(
            data_dir=data_dir,
            store_url=store_url,
            host=host,
            port=port,
            durability=durability,
            commit_log=commit_log,
            checkpoint_secs=checkpoint_secs,
            max_frame=max_frame,
            max_connections=max_connections,
            max_connections_per_user=max_connections_per_user,
            max_unauthenticated_per_address=max_unauthenticated_per_address,
            cache_mb=cache_mb,
            head_tasks=head_tasks,
            sqlite_cache_mb=sqlite_cache_mb,
            security=SecurityConfig(
                auth_file=auth_file, auth_timeout_secs=auth_timeout_secs, tls_cert=tls_cert, tls_key=tls_key, tls_port=tls_port, plaintext=plaintext
            ),
            frame_timeout_secs=frame_timeout_secs,
            idle_timeout_secs=idle_timeout_secs,
            max_buffered_mb=max_buffered_mb,
        )
        faces = build_faces(udp_port=udp_port, sqs_port=sqs_port, http_port=http_port,
                            metrics_queue_series=metrics_queue_series, http_host_names=http_host_names,
                            extensions=extensions)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    try:
        status = run_broker(config, faces, extensions)
    # the port is taken, a bad auth file or data directory, a store of a newer schema, ...
    except (OSError, errors.StorageFailure, errors.ClusterIdentity, errors.SchemaTooNew, errors.CopyUnfinished,
            ValueError) as exc:
        from kittiwake.store.faults import diagnose_directory

        location = config.store_location
        fault = diagnose_directory(location.target) if location.kind == "sqlite" else None
        why = f" ({location.target}: {fault.value})" if fault is not None else ""
        what = f"{exc.code}: {exc.message}" if isinstance(exc, errors.KittiwakeError) else exc
        click.echo(f"kittiwake broker: cannot start: {what}{why}", err=True)
        sys.exit(1)
    sys.exit(status)


def _sqs_command() -> click.Command:
    """`kittiwake sqs`: the broker with its SQS API on (port 9324, the port SQS emulators use)."""
    params = []
    for param in broker.params:
        if param.name == "sqs_port":
            param = click.Option(["--sqs-port"], type=click.IntRange(0, 65535), default=DEFAULT_SQS_PORT,
                                 show_default=True, help="Port of the SQS API; 0 picks a free one.")
        params.append(param)
    return click.Command(
        "sqs", callback=broker.callback, params=params,
        help="Run a broker with its SQS API on (as `kittiwake broker --sqs-port 9324`): point boto3 or the AWS CLI "
        "at http://HOST:9324.",
    )


DEFAULT_SQS_PORT = 9324
sqs = _sqs_command()
