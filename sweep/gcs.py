"""Is a Ray cluster's GCS answering? Checked before a run joins an address, and watched while it runs.

`--address` names the cluster's GCS (HOST:PORT, what `ray start --head` prints). ray.init retries an
address for minutes whatever answers there, and an endpoint that is not a GCS (the dashboard's port
8265, any HTTP server, a port that accepts and says nothing) ends in a hang or a long traceback. One
gRPC call of the GCS's own service (NodeInfoGcsService.GetClusterId) with a deadline of a few seconds
tells them apart: a GCS answers it (or refuses it for want of a token, which only a GCS does), an HTTP
server breaks the HTTP/2 handshake at once, another gRPC server (a raylet) does not know the call, a
silent port runs out the deadline.

While a run goes on, a watchdog thread asks the same question every few seconds. When the GCS stops
answering (it was killed, or the head node went away), Ray's own driver code would print "Failed to
connect to GCS" after a minute and end the process with 1, which reads as "some trial failed". The
watchdog prints the engine's line with the resume command first and exits with LOST_EXIT.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Callable

from sweep.errors import ClusterError, read_or_refuse
from sweep.limits import quote, shown
from trainables.config import env_seconds

LOST_EXIT = 75  # sysexits' EX_TEMPFAIL: nothing is wrong with the input; resume once the cluster is back
PROBE_TIMEOUT_S = 4.0
# Ray's driver ends itself this long after the GCS goes (its gcs_rpc_server_reconnect_timeout_s); a GCS
# with fault tolerance (Redis) may come back within it.
RAY_RECONNECT_S = 60.0
GRACE_VARIABLE = "SWEEP_GCS_GRACE_S"  # how long a joined cluster's GCS may be away: RAY_RECONNECT_S by default
# An embedded Ray's GCS has no fault tolerance: once its port refuses connections, it is gone (at once where
# the driver sees its process has exited, own_gcs_exited). A GCS that is there but silent (an overloaded
# machine) gets longer, still short of Ray's own minute.
EMBEDDED_GONE_S, EMBEDDED_SILENT_S = 10.0, 45.0


def check_address(address: str, source: str = "--address") -> None:
    """Fail in seconds, in one line, unless a Ray GCS answers at `address`; `source` names where it came
    from (--address, RAY_ADDRESS). "auto" is the cluster `ray start` last recorded on this machine."""
    said = f"{source} {shown(address)}"
    if address == "auto":
        address = _recorded_cluster(said)
    if address.startswith("ray://"):
        raise ClusterError(f"{said}: Ray Client addresses are not supported; give the GCS address HOST:PORT")
    host, _, port = address.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536 or not host.isprintable() \
            or any(c.isspace() for c in host):
        raise ClusterError(f"{said}: expected HOST:PORT of the cluster's head (ray start --head prints it)")
    problem = probe(address, PROBE_TIMEOUT_S)
    if problem:
        raise ClusterError(f"{said}: {problem}")


def _recorded_cluster(said: str) -> str:
    """The address behind "auto", as ray.init finds it: the cluster `ray start` recorded on this machine."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except Exception as e:  # noqa: BLE001 - Ray's own lookup, whatever it raises, is one line here
        raise ClusterError(f"{said}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__}") from None
    if not found:
        raise ClusterError(f"{said}: no Ray cluster is recorded on this machine (`ray start --head` records one); "
                           "give HOST:PORT")
    return found


def probe(address: str, timeout_s: float) -> str | None:
    """None when a Ray GCS answers at HOST:PORT within about `timeout_s`; else why not, in a few words."""
    return _probe(address, timeout_s)[0]


def _probe(address: str, timeout_s: float) -> tuple[str | None, bool]:
    """probe's answer, and whether a failure is certain: the host refused the connection (nothing listens
    on the port any more), as opposed to a silence that an overloaded GCS may also give."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    try:
        family, kind, proto, _, where = _resolve(host, int(port), timeout_s)
        with socket.socket(family, kind, proto) as s:
            s.settimeout(timeout_s)
            s.connect(where)
    except OSError as e:
        return f"no Ray cluster answers there ({e.strerror or e})", isinstance(e, ConnectionRefusedError)
    return _ask_gcs(address, timeout_s), False


def _resolve(host: str, port: int, timeout_s: float) -> tuple:
    """getaddrinfo with a deadline (it has none, and a name no server knows can take a minute)."""
    found: list = []

    def look_up() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0])
        except (OSError, ValueError) as e:  # ValueError: a label over 63 characters (idna), a NUL
            found.append(e)

    thread = threading.Thread(target=look_up, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not found:
        raise OSError(f"the host name {quote(host)} did not resolve within {timeout_s:g} s")
    if isinstance(found[0], Exception):
        raise OSError(f"unknown host {quote(host)}") from found[0]
    return found[0]


def _ask_gcs(address: str, timeout_s: float) -> str | None:
    import grpc
    from ray._private.gcs_utils import create_gcs_channel  # Ray's own channel: its TLS and token options
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = create_gcs_channel(address)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
        return None
    except grpc.RpcError as e:
        code = e.code()
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return None  # a GCS that wants a token: ray.init brings it (or says it lacks it)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"something accepts connections there but does not answer as a Ray GCS within {timeout_s:g} s"
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return "a gRPC service answers there, but not a Ray GCS (a raylet's or an agent's port?)"
        if "HTTP/2" in (e.details() or ""):
            return ("an HTTP server answers there, not a Ray GCS (the dashboard's port, 8265? "
                    "give the GCS port, 6379 by default)")
        return f"not a Ray GCS ({code.name.lower()}: {(e.details() or '').splitlines()[0][:120]})"
    finally:
        channel.close()


class ClusterLost(Exception):
    """The connected cluster's GCS stopped answering while the run went on; the message says how."""


def cluster_lost(watch_s: float = 0.0, timeout_s: float = 2.0) -> str | None:
    """Why the connected Ray's GCS does not answer, or None while it does: asked once, or for `watch_s`
    (a head node goes process by process: its trials' actors may die a moment before its GCS does).
    Asked when a trial fails or Ray raises: a failure that is the cluster's loss is not the trial's."""
    import ray

    address = ray.get_runtime_context().gcs_address
    if watch_s and _own_head_running():
        watch_s = 0.0
    end = time.monotonic() + watch_s
    while True:
        why = probe(address, timeout_s)
        if why or time.monotonic() >= end:
            return why
        time.sleep(0.5)


def _own_head() -> dict[str, bool] | None:
    """Where this driver started the Ray it is connected to (an embedded Ray: its head's processes are this
    driver's children), whether that head's GCS and raylet still run ({"gcs_server": True, "raylet": True});
    None for a Ray the driver joined, whose processes it cannot see."""
    from ray._private import ray_constants
    from ray._private.worker import global_worker

    node = getattr(global_worker, "node", None)
    if node is None or not node.head:
        return None
    running = {kind for kind, _ in node.live_processes()}
    return {kind: kind in running for kind in (ray_constants.PROCESS_TYPE_GCS_SERVER, ray_constants.PROCESS_TYPE_RAYLET)}


def _own_head_running() -> bool:
    """An embedded Ray whose GCS and raylet both run: a trial's actor that died then died alone, and there is
    no need to watch for the head going after it (a watch holds up Tune's loop, every trial's)."""
    head = _own_head()
    return head is not None and all(head.values())


def own_gcs_exited() -> bool:
    """An embedded Ray whose GCS process has exited: gone for certain (it has no fault tolerance)."""
    head = _own_head()
    return head is not None and not head["gcs_server"]


def joined_grace() -> float:
    """Seconds a joined cluster's GCS may be away before the run ends: $SWEEP_GCS_GRACE_S, else Ray's minute
    (a GCS with fault tolerance that takes longer to come back needs more; a test that kills one, less)."""
    return read_or_refuse(lambda: env_seconds(GRACE_VARIABLE, RAY_RECONNECT_S, 3600))


def outlast_ray(joined: bool) -> None:
    """On a joined cluster, let the watchdog speak before Ray's driver code ends the process.

    Only for a joined cluster: the driver then starts no Ray process of its own that would inherit it.
    Set before ray.init; a value the user set stays.
    """
    if joined:
        os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(int(joined_grace() * 3)))


class Watchdog:
    """Probes the GCS every `interval_s` and calls `lost(reason)` once it has refused connections for
    `gone_s`, or not answered at all for `silent_s`.

    `lost` must end the process (the main thread is then stuck in Ray calls that never return).
    """

    def __init__(self, address: str, gone_s: float, silent_s: float, lost: Callable[[str], None],
                 interval_s: float = 2.0, timeout_s: float = PROBE_TIMEOUT_S,
                 exited: Callable[[], bool] = lambda: False) -> None:
        self.address, self.gone_s, self.silent_s, self.lost = address, gone_s, silent_s, lost
        self.exited = exited  # True once the GCS's process is known to have ended: refused is then gone at once
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sweep-gcs-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # before Ray is shut down, which the watchdog must not take for a loss
        self._thread.join(timeout=self.timeout_s + self.interval_s)

    def _watch(self) -> None:
        silent_since = refused_since = None
        while not self._stop.wait(self.interval_s):
            problem, refused = _probe(self.address, self.timeout_s)
            now = time.monotonic()
            silent_since = None if problem is None else silent_since or now
            refused_since = refused_since or now if refused else None
            gone = refused_since is not None and (now - refused_since >= self.gone_s or self.exited())
            if problem and (gone or now - silent_since >= self.silent_s) and not self._stop.is_set():
                self.lost(problem)
                return


def exit_lost(error: str, then: str | None) -> None:
    """What a Watchdog's `lost` does in the CLI: the error line (and `then`, the resume command), then the
    process ends at once with LOST_EXIT."""
    print(f"error: {error}", file=sys.stderr, flush=True)
    if then:
        print(then, flush=True)
    os._exit(LOST_EXIT)  # the main thread is blocked inside Ray: no orderly unwinding is possible
