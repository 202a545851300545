"""Serve moto's SQS/SNS emulator on HOST:PORT (HOST 127.0.0.1 unless given) until stdin closes.

The test binary that starts this holds its stdin; when that process exits (passed, failed or
killed), stdin reaches end of file and the server stops, so no broker outlives its tests.
In the stand-in image (`cargo xtask brokers images`) it serves 0.0.0.0:4566 inside the container
and also prints LocalStack's ready line, which the LocalStack container definition waits for.
"""
import logging
import os
import sys
import threading
import time

from cryptography.hazmat.primitives.asymmetric import rsa
from moto.core.utils import get_service_model
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import ThreadedMotoServer
from werkzeug.serving import BaseWSGIServer
from moto.sns import models as sns_models
from moto.sqs import models as sqs_models


def _snapshot_views(mapping):
    """`mapping` as the same kind of dict whose iteration and views are copies.

    moto 5.2.5 (the newest) iterates its queue and subscription maps live while another request
    thread of its threaded server adds or removes an entry: "dictionary changed size during
    iteration" in Queue._setup_dlq (a CreateQueue with a redrive policy, while another cell
    creates its queue) and "OrderedDict mutated during iteration" in
    SNSBackend._get_topic_subscriptions (a Publish, while another cell subscribes). The request
    gets a 500, which the AWS SDK retries with backoff: under the whole matrix a republishing
    requeue took over 10 s, sns DC-6's pump stop limit (2 runs in 3). A copy made by list() of a
    dict holds the GIL throughout, so it cannot race; no SQS or SNS semantics change.
    """

    class Snapshot(type(mapping)):
        def __iter__(self):
            return iter(list(super().keys()))

        def keys(self):
            return list(super().keys())

        def values(self):
            return list(super().values())

        def items(self):
            return list(super().items())

    return Snapshot(mapping)


def _iterated_as_snapshots(backend, *maps):
    original = backend.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        for name in maps:
            setattr(self, name, _snapshot_views(getattr(self, name)))

    backend.__init__ = __init__


_iterated_as_snapshots(sqs_models.SQSBackend, "queues")
_iterated_as_snapshots(sns_models.SNSBackend, "subscriptions")


def _receives_one_pass_at_a_time(backend):
    """Make each of ReceiveMessage's passes over a queue one step, as SQS does.

    moto 5.2.5 checks that a message is visible and then marks it received without a lock, so
    two request threads polling one queue can both take the same message inside its visibility
    timeout (competing consumers: sqs DC-3 routed one message twice in CI). Measured with
    `sys.setswitchinterval(1e-6)` and 4 receivers long-polling one queue: 25 of 100 sends were
    taken by two or three of them; with this lock, none. The long poll keeps moto's own rhythm
    (a pass, then up to a second's wait for a visible message) but waits outside the lock, so
    receivers still poll side by side.
    """
    original = backend.receive_message
    passes = threading.Lock()

    def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
        polling_end = time.time() + wait_seconds_timeout
        while True:
            with passes:
                result = original(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            remaining = polling_end - time.time()
            if result or remaining <= 0:
                return result
            self.get_queue(queue_name).wait_for_messages(min(1, remaining))

    backend.receive_message = receive_message


_receives_one_pass_at_a_time(sqs_models.SQSBackend)


def _backend_found_once_per_host(dispatcher):
    """Find each request's backend by its host once, not on every request under a lock.

    moto 5.2.5 routes every request under one lock (DomainDispatcherApplication.get_application),
    and inside it lists moto's package directory and stats each of its ~200 entries
    (backends.list_of_moto_modules) before matching hundreds of URL patterns. Each stat gives up
    the GIL and must win it back from every busy request thread (up to the 5 ms switch interval
    each time), so under a whole matrix the lock's holder crawled and every request queued
    behind it: py-spy (attached, so slowing moto further) during the sqs matrix found 96% of its
    threads' samples waiting on that lock while moto used 22% of a core; under `cargo xtask test`
    a requeue's ChangeMessageVisibility took up to 9.8 s inside moto (DC-6's pump stuck settling
    past its 10 s stop limit). The answer depends only on the
    host and the installed package, so it is kept; no SQS or SNS semantics change.
    """
    original = dispatcher.get_backend_for_host
    found = {}

    def get_backend_for_host(self, host):
        if host not in found:
            found[host] = original(self, host)
        return found[host]

    dispatcher.get_backend_for_host = get_backend_for_host


_backend_found_once_per_host(DomainDispatcherApplication)


def _one_signing_key(subscription):
    """Sign every subscription's SNS envelopes with one key, made once.

    moto 5.2.5 makes a 2048-bit RSA key for each subscription at its first delivery, on the
    request thread of the Publish (py-spy: the most CPU-heavy leaf of an sns matrix's first
    20 s). The signature is moto's own (its SigningCertURL is AWS's, which nothing here can
    fetch), and the gateway does not check it; one key keeps the envelope's shape.
    """
    key = []

    def private_key(self):
        if not key:
            key.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
        return key[0]

    subscription.private_key = private_key


_one_signing_key(sns_models.Subscription)


def _service_models_loaded():
    """Load SQS's and SNS's botocore models before the first request, not in it.

    moto caches each service model (moto.core.utils.get_service_model) at a request's first
    use, without a lock, so every request of a matrix's first burst loaded it on its own, each
    stat of botocore's data directory (400 services) giving up the GIL: SNS requests of that
    burst took up to 9 s.
    """
    for service in ("sqs", "sns"):
        get_service_model(service)


# werkzeug listens with a backlog of 128, and moto accepts connections on one thread, which the
# GIL and two busy cores starve under a whole matrix: the accept queue was seen full (129 of 128,
# `ss -ltn`) and the kernel dropped 443 connection attempts in one all-transport run
# (TcpExtListenOverflows), each an AWS SDK connect timing out after 3.1 s and retried with backoff
# (sqs-family cells missing their bounds, a pump's settle taking over 10 s). The kernel completes
# a handshake for moto while its queue has room; 4096 is this machine's somaxconn.
BaseWSGIServer.request_queue_size = 4096


def main() -> None:
    # A test's lever (providers::sqs::start_moto_switching_threads_every): a thread switch every
    # microsecond instead of every 5 ms makes moto's thread races likely instead of rare.
    if "MOTO_SWITCH_INTERVAL" in os.environ:
        sys.setswitchinterval(float(os.environ["MOTO_SWITCH_INTERVAL"]))
    _service_models_loaded()
    port = int(sys.argv[1])
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    # One line per request would bury the test output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    print(f"moto listening on {host}:{port}", flush=True)
    if host != "127.0.0.1":
        print("Ready.", flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
