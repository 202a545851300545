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
