"""Serve moto's SQS/SNS emulator on HOST:PORT (HOST 127.0.0.1 unless given) until stdin closes.

The test binary that starts this holds its stdin; when that process exits (passed, failed or
killed), stdin reaches end of file and the server stops, so no broker outlives its tests.
In the stand-in image (`cargo xtask brokers images`) it serves 0.0.0.0:4566 inside the container
and also prints LocalStack's ready line, which the LocalStack container definition waits for.
"""
import logging
import sys

from moto.server import ThreadedMotoServer
from moto.sns import models as sns_models


def _topic_subscriptions_snapshot(self, topic):
    # moto 5.2.5 (the newest) iterates its subscriptions live while a request thread of its own
    # threaded server subscribes or unsubscribes another cell's queue: "RuntimeError: OrderedDict
    # mutated during iteration", a 500 to the Publish, which the AWS SDK retries with backoff
    # (under the whole matrix, a republishing requeue took over 10 s: sns DC-6's pump stop limit,
    # 2 runs in 3). moto's other readers of the map take a copy first; this one does too. No SNS
    # semantics change: the same subscriptions, read as of one moment.
    return [sub for sub in list(self.subscriptions.values()) if sub.topic == topic]


sns_models.SNSBackend._get_topic_subscriptions = _topic_subscriptions_snapshot


def main() -> None:
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
