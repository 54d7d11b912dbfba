"""`serve`'s check of its host and port before any database work (server.check_can_listen): it
must refuse what aiohttp's bind (asyncio's create_server) would refuse, and nothing else."""

from __future__ import annotations

import asyncio
import errno
import socket

import attrs
import pytest

from service import server
from service.config import Config


def config(host: str, port: int, workers: int = 1) -> Config:
    base = Config()
    return attrs.evolve(base, server=attrs.evolve(base.server, host=host, port=port, workers=workers))


async def create_server(host: str, port: int) -> None:
    """Bind as web.run_app does (asyncio's create_server), and let go."""
    listening = await asyncio.get_running_loop().create_server(
        asyncio.Protocol, host=host or None, port=port, reuse_address=True)
    listening.close()
    await listening.wait_closed()


def ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6(), reason="no IPv6 on this host")
async def test_check_can_listen__an_ipv6_host_beside_another_process_on_ipv4_any(capsys):
    """asyncio binds an IPv6 address IPV6_V6ONLY: `::` shares its port with a socket on
    0.0.0.0. The probe bound it dual-stack, met that socket, and refused to start (exit 2) a
    service that would have listened."""
    with socket.socket(socket.AF_INET) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("0.0.0.0", 0))
        other.listen()
        port = other.getsockname()[1]
        await create_server("::", port)  # aiohttp would listen
        for workers in (1, 2):
            server.check_can_listen(config("::", port, workers))
    assert capsys.readouterr().err == ""


def test_check_can_listen__an_address_family_the_kernel_lacks_is_skipped(monkeypatch, capsys):
    """asyncio skips an address it cannot make a socket for (an IPv6 `::` of an empty host on a
    kernel without IPv6: EAFNOSUPPORT) and listens on the others; the probe ended start-up there
    with a traceback."""
    real = socket.socket

    def without_ipv6(family: int = socket.AF_INET, *args: object, **kwargs: object) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", without_ipv6)
    server.check_can_listen(config("", 0))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("family", "taken_on", "host", "shown"), [
    (socket.AF_INET, "127.0.0.1", "localhost", "localhost"),
    # The line wrote `:::8080` for an IPv6 host; an address with its port is `[::1]:8080`.
    pytest.param(socket.AF_INET6, "::1", "::1", "[::1]",
                 marks=pytest.mark.skipif(not ipv6(), reason="no IPv6 on this host")),
])
def test_check_can_listen__a_taken_port_is_one_line_and_exit_2(capsys, family, taken_on, host, shown):
    with socket.socket(family) as other:
        other.bind((taken_on, 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            server.check_can_listen(config(host, port))
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"error: server.port: cannot listen on {shown}:{port}: address already in use\n")


def test_check_can_listen__workers_beside_another_services_workers_is_exit_2(capsys):
    """A probe: `serve --workers 2` started while another `serve --workers 2` listened on the port
    (a forgotten instance, an old release not stopped) started too: both sets of workers bind
    with SO_REUSEPORT, and the kernel spread connections over the two services at random. The
    check now binds without it, so any socket on the port refuses the start."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as the other's workers do
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            server.check_can_listen(config("127.0.0.1", port, workers=2))
    assert exited.value.code == 2
    assert "address already in use" in capsys.readouterr().err
