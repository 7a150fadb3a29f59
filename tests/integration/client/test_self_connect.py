"""A connection that the kernel connected to itself is dropped.

With a broker down and its port P inside `net.ipv4.ip_local_port_range`, a client reconnecting to
P can be given P as its own source port; TCP's simultaneous open then connects the socket to
itself. Its ApiVersions request comes back as the "answer", and the socket holds P, so the broker
cannot listen there again. This happened to ShareConsumers reconnecting after a broker kill.

The test makes it certain instead of rare: in a network namespace of its own (`unshare -n`, which
needs root, as CI runs), the ephemeral range is the one port P, so the client's only possible
source port is the broker's port.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

PORT = 40000

SCRIPT = textwrap.dedent(f"""
    import asyncio, fcntl, socket, struct

    # The new namespace's loopback is down: bring it up (SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP).
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0))[:18])[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
    with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
        f.write("{PORT} {PORT}")

    from exactly.client.connection import BrokerConnection
    from exactly.client.errors import KafkaConnectionError

    async def main():
        try:
            conn = await BrokerConnection.connect("127.0.0.1", {PORT}, request_timeout_ms=5000)
        except KafkaConnectionError as exc:
            print("refused:", exc)
        else:
            print("connected to", conn)
        await asyncio.sleep(0.1)  # the transport closes its socket on the loop's next turn
        # The port is free again: a broker could listen there.
        server = socket.socket()
        server.bind(("127.0.0.1", {PORT}))
        server.listen()
        print("bound again")

    asyncio.run(main())
""")


def test_a_socket_connected_to_itself_is_dropped_and_the_port_freed() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a network namespace of its own")
    proc = subprocess.run(["unshare", "-n", sys.executable, "-c", SCRIPT], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "refused: cannot connect to 127.0.0.1:40000: connected to itself" in proc.stdout, (
        proc.stdout + proc.stderr)
    assert "bound again" in proc.stdout
