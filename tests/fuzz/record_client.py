#!/usr/bin/env python3
"""Records a real TLS client's first flight for tests/fuzz/seeds-tls/.

Listens on 127.0.0.1:PORT, forwards one connection to a spindle with TLS on
127.0.0.1:UPSTREAM, and writes what the client sent before the server's
first reply (its ClientHello) to OUT as a fuzz_tls input: byte 0 (server 0,
raw ciphertext), byte 1 (no control bytes), then the bytes. Only the first
flight is kept: the rest depends on that server's randomness and would not
replay. Bounded: 20 s to accept, 10 s of forwarding.

    spindle -p 8443 -s tls=on -s tls_certificate=C -s tls_certificate_key=K &
    tests/fuzz/record_client.py 8444 8443 tests/fuzz/seeds-tls/s_client-hello &
    openssl s_client -connect 127.0.0.1:8444 -alpn http/1.1 </dev/null
"""
import select
import socket
import sys
import time


def main() -> None:
    port, upstream, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    ls.settimeout(20)
    client, _ = ls.accept()
    server = socket.create_connection(("127.0.0.1", upstream))
    first, replied, end = b"", False, time.monotonic() + 10
    while time.monotonic() < end:
        ready, _, _ = select.select([client, server], [], [], 0.5)
        if client in ready:
            data = client.recv(65536)
            if not data:
                break
            if not replied:
                first += data
            server.sendall(data)
        if server in ready:
            data = server.recv(65536)
            if not data:
                break
            replied = True
            client.sendall(data)
    with open(out, "wb") as f:
        f.write(bytes([0, 0]) + first)
    print(f"{out}: the client's first flight, {len(first)} bytes")


if __name__ == "__main__":
    main()
