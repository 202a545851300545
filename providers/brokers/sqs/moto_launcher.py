"""Serve moto's SQS/SNS emulator on HOST:PORT (HOST 127.0.0.1 unless given) until stdin closes.

The test binary that starts this holds its stdin; when that process exits (passed, failed or
killed), stdin reaches end of file and the server stops, so no broker outlives its tests.
In the stand-in image (`cargo xtask brokers images`) it serves 0.0.0.0:4566 inside the container
and also prints LocalStack's ready line, which the LocalStack container definition waits for.
"""
import logging
import sys

from moto.server import ThreadedMotoServer


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
