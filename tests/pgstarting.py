"""A stand-in for a PostgreSQL server's socket that is starting, then started: its first
connection is refused as a starting server refuses one (SQLSTATE 57P03, "not yet accepting
connections"), and every later one is passed through to the real server's socket.

`python -m tests.pgstarting DIRECTORY SERVER_SOCKET_DIRECTORY` listens at DIRECTORY's
`.s.PGSQL.5432` and prints "listening" once it does. A process of its own: libpq's ping, which
the store sends after a failed connection, holds Python's lock while it waits for an answer.
"""

from __future__ import annotations

import socket
import sys
import threading

SOCKET = ".s.PGSQL.5432"
NOT_YET = b"SFATAL\0VFATAL\0C57P03\0Mthe database system is not yet accepting connections\0\0"


def refuse(client: socket.socket) -> None:
    """Read the startup message and answer it with the starting server's error."""
    length = int.from_bytes(client.recv(4), "big")
    while length > 4:
        length -= len(client.recv(length - 4))
    client.sendall(b"E" + (len(NOT_YET) + 4).to_bytes(4, "big") + NOT_YET)
    client.close()


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main(directory: str, server: str) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(f"{directory}/{SOCKET}")
    listener.listen()
    print("listening", flush=True)
    client, _ = listener.accept()
    refuse(client)
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(f"{server}/{SOCKET}")
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(source, sink), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
