#!/usr/bin/env python3
"""Calls whose request message never comes, against a running gdt-coord.

Opens CONNECTIONS plaintext HTTP/2 connections to ENDPOINT and on each
starts STREAMS gRPC calls (GetStatus by default): the headers of each are
sent, its message never is. Holds them for SECONDS, then closes them. With
--pid it reports the coordinator's resident memory before, once the
streams are open, and every 10 s; with --status it runs
`gdt-coord status` meanwhile and reports whether it answered and how fast.
Only for a coordinator you run yourself (docs/security.md "What stays
open"). Usage:

  bench/coord_stalled_streams.py --endpoint 127.0.0.1:7070 \\
      --connections 100 --streams 255 --seconds 70 --pid $(pidof gdt-coord) \\
      --status build-test/coordinator/gdt-coord [--source 127.0.0.2]
"""

import argparse
import socket
import struct
import subprocess
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream_id, payload):
    return (struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) +
            struct.pack(">I", stream_id) + payload)


def literal(name, value):
    """An HPACK header without indexing, names and values short."""
    name, value = name.encode(), value.encode()
    if len(name) > 126 or len(value) > 126:
        raise SystemExit(f"coord_stalled_streams: header {name!r} or its value "
                         "is longer than 126 bytes, which this script cannot "
                         "encode")
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def status_seconds(binary, endpoint):
    """gdt-coord status's exit code and seconds; None when it did not answer
    within 60 s."""
    start = time.monotonic()
    try:
        done = subprocess.run([binary, "status", "--coordinator", endpoint],
                              capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start
    return done.returncode, time.monotonic() - start


def closed_by_server(sockets):
    """Removes from `sockets` (and closes) those the server has closed: they
    read their end, or were reset. Returns how many."""
    closed = 0
    for connection in list(sockets):
        connection.setblocking(False)
        try:
            while True:
                data = connection.recv(65536)
                if not data:
                    ended = True
                    break
        except BlockingIOError:
            ended = False
        except OSError:
            ended = True
        if ended:
            closed += 1
            sockets.remove(connection)
            connection.close()
    return closed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--streams", type=int, default=255)
    parser.add_argument("--seconds", type=float, default=70)
    parser.add_argument("--method", default="/gdt.v1.Coordinator/GetStatus")
    parser.add_argument("--pid", type=int)
    parser.add_argument("--status", help="a gdt-coord binary")
    parser.add_argument("--source", help="connect from this local address "
                        "(e.g. 127.0.0.2, another peer than `--status`)")
    args = parser.parse_args()
    host, port = args.endpoint.rsplit(":", 1)
    headers = (literal(":method", "POST") + literal(":scheme", "http") +
               literal(":path", args.method) + literal(":authority", host) +
               literal("content-type", "application/grpc") +
               literal("te", "trailers"))
    if args.pid:
        print(f"rss before: {rss_kib(args.pid)} KiB", flush=True)
    sockets = []
    refused = 0
    data = PREFACE + frame(4, 0, 0, b"")  # SETTINGS
    for i in range(args.streams):
        data += frame(1, 4, 2 * i + 1, headers)  # HEADERS, END_HEADERS
    for _ in range(args.connections):
        connection = socket.create_connection(
            (host, int(port)),
            source_address=(args.source, 0) if args.source else None)
        try:
            connection.sendall(data)
        except OSError:  # Closed by the server on accept.
            refused += 1
            connection.close()
            continue
        sockets.append(connection)
    print(f"opened {args.connections} connections x {args.streams} streams",
          flush=True)
    time.sleep(1)
    refused += closed_by_server(sockets)
    print(f"closed by the server: {refused}; held: {len(sockets)}",
          flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        line = f"t+{args.seconds - (end - time.monotonic()):.0f}s"
        if args.pid:
            line += f" rss {rss_kib(args.pid)} KiB"
        if args.status:
            code, seconds = status_seconds(args.status, args.endpoint)
            line += (" status: no answer in 60 s" if code is None else
                     f" status exit {code} in {seconds:.2f} s")
        print(line, flush=True)
        time.sleep(min(10, max(0, end - time.monotonic())))
    refused += closed_by_server(sockets)
    print(f"at the end: closed by the server: {refused}; held: "
          f"{len(sockets)}", flush=True)
    for connection in sockets:
        connection.close()


if __name__ == "__main__":
    main()
