"""What a face may use of the broker that hosts it, and what the broker asks of a face.

A *face* is one way into a broker beside its binary port: the SQS API
(`kittiwake.sqs`), the dashboard and its JSON API (`kittiwake.observe`), UDP
datagrams (`kittiwake.broker.udp`), and later a broker-to-broker link. The
broker names none of them: the composition root (`cli/broker_command.py`, or
a test) builds the faces from its options and hands them to
`Broker(config, faces=[...])`, which starts each after the store is open,
stops each before the store closes, and reports their ports.

A face sees the broker only through `Host`:

* `submit(caller, request)` runs a protocol request in the group commit, as
  a TCP connection's requests run — the same dispatch, the same access rules,
  the same durable commit before the reply reaches `caller.deliver`;
  `withdraw(caller)` drops what the group commit still holds for a caller
  (a parked long-poll nobody waits for any more). `kittiwake.broker.local_calls`
  turns these into one awaitable call per request;
* `reads()` is the engine as the last pass committed it, read on the event
  loop between passes (None while the store has failed); `wall_clock()` the
  engine's clock;
* `on_commit(listener)` hears of every committed pass (its tally of moves and
  its commit's seconds); it returns the unsubscribe, and any number of faces
  may listen;
* `labels` are constant labels every metric series carries (a cluster
  node's `node`, from the request extensions, `extensions`);
* `authenticator` checks credentials and rights (None: no auth file), under
  the broker's one failure budget;
* the *budgets* every face shares with the binary port: `connection_slots`
  (one cap on connections for the whole process, all ports together) and
  `read_budget` (one budget of request bytes held while they arrive: binary
  frames and HTTP bodies alike).

A face, in turn, is `Face`: a `name` (its port appears in the listening line
as `<name>_port=N`), `start(host) -> port`, `stop_accepting()`, `stop()`,
`connections()` (how many it holds now) and `exposure_warnings(...)` (what it
should warn about at start, given where it listens and whether auth and TLS
are on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable, Protocol

from kittiwake.broker.pass_replies import Caller
from kittiwake.engine.tally import Tally
from kittiwake.model import Limits
from kittiwake.protocol.messages import Request

if TYPE_CHECKING:
    from kittiwake.broker.auth import Authenticator
    from kittiwake.broker.connection_slots import ConnectionSlots
    from kittiwake.broker.read_budget import ReadBudget
    from kittiwake.engine import Engine

__all__ = ["Caller", "CommitListener", "Exposure", "Face", "Host"]

CommitListener = Callable[[Tally, "float | None"], None]  # (moves of the pass, its commit's seconds or None)


class Exposure(Protocol):
    """Where the broker listens and how it is protected, as a face's start-up warnings need it."""

    @property
    def address(self) -> str: ...  # the address faces listen on (`--host`)

    @property
    def auth(self) -> bool: ...  # an auth file is in force

    @property
    def tls(self) -> bool: ...  # the binary port offers TLS


class Host(Protocol):
    """What a face may use of the broker that hosts it."""

    @property
    def address(self) -> str: ...  # the address to listen on

    @property
    def limits(self) -> Limits: ...  # published limits of tasks and requests

    @property
    def max_frame(self) -> int: ...

    @property
    def authenticator(self) -> Authenticator | None: ...  # None: no auth file, everyone may do everything

    @property
    def accepting(self) -> bool: ...  # False once the broker stops

    @property
    def started_at(self) -> float | None: ...  # epoch seconds the store opened

    @property
    def store_kind(self) -> str: ...  # "sqlite", "postgresql", ...

    @property
    def labels(self) -> Mapping[str, str]: ...  # constant labels of every metric series (a cluster node's `node`)

    @property
    def connection_slots(self) -> ConnectionSlots: ...

    @property
    def read_budget(self) -> ReadBudget: ...

    def submit(self, caller: Caller, request: Request | bytes) -> None:
        """Run `request` in the next group-commit pass; its reply goes to `caller.deliver`."""

    def withdraw(self, caller: Caller) -> None:
        """Forget what waits on `caller` (a parked long-poll): nobody reads its reply any more."""

    def reads(self) -> Engine | None:
        """The engine as the last pass committed it; None while the store has failed."""

    def wall_clock(self) -> float:
        """The engine's clock, epoch seconds."""

    def on_commit(self, listener: CommitListener) -> Callable[[], None]:
        """Call `listener` after every committed pass; returns the function that unsubscribes it."""

    def ports(self) -> dict[str, int]:
        """Every listening port by name: `port` (binary), `tls_port`, and `<face>_port` of each face."""

    def connection_counts(self) -> dict[str, int]:
        """Connections held now: `tcp` for the binary port, and each face's by its name."""


class Face(Protocol):
    """One way into the broker, plugged in from above."""

    @property
    def name(self) -> str: ...  # short and stable: "sqs", "http", "udp"

    async def start(self, host: Host) -> int:
        """Start listening; returns the port."""

    def stop_accepting(self) -> None:
        """Take no new connections or requests; what is in flight still gets its answer."""

    async def stop(self) -> None:
        """Close everything; called once the broker's last pass has answered what was received."""

    def connections(self) -> int:
        """How many connections (or sessions) the face holds now."""

    def exposure_warnings(self, exposure: Exposure) -> list[str]:
        """What to warn about at start, given where the broker listens and how it is protected."""
