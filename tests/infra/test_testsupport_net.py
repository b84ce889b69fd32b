"""The loopback ports tests start their servers on."""

from __future__ import annotations

import socket

from testsupport.net import LOOPBACK, free_port


def test_a_port_is_handed_out_once_per_process():
    # A bare bind-to-0 gives the same port twice in a few hundred calls (a Ray head asking for six
    # ports once got one twice and did not start): every call here must give a new one.
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)


def test_a_handed_out_port_can_be_bound():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, port))
