"""Serve moto's SQS/SNS emulator on 127.0.0.1:PORT until the parent process goes away.

The test binary that starts this holds its stdin; when that process exits (passed, failed or
killed), stdin reaches end of file and the server stops, so no broker outlives its tests.
"""
import logging
import sys

from moto.server import ThreadedMotoServer


def main() -> None:
    port = int(sys.argv[1])
    # One line per request would bury the test output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print(f"moto listening on 127.0.0.1:{port}", flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
