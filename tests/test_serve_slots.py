"""`specviz serve`'s sign-in slots, on a real server in this process: at most 8 connections
wait to sign in, at most 2 of them from one client address, and each gets 10 s to give the
token. The token decides, not the address: a new connection past a cap takes the place of
the one waiting longest, so slow connections that reconnect keep no client out (they did:
behind an SSH tunnel every client has the tunnel's address). Refusals are logged a few per
10 s, the rest counted. The tests wait for no clock: they watch the server's own count of
waiting connections, and the 10 s limit is given short here."""

from __future__ import annotations

import asyncio
import sys

from specviz.engines.host import protocol
from specviz.engines.host import relay as srv

TOKEN = "t" * 32


def test_the_numbers_promised():
    assert (srv.MAX_PENDING, srv.MAX_PENDING_PER_HOST, srv.AUTH_S) == (8, 2, 10.0)
    assert srv.EngineServer(TOKEN).auth_s == srv.AUTH_S


async def connect(address: srv.Address, source: str):
    """A client at `source` (any of 127.0.0.0/8: each address a client of its own)."""
    return await asyncio.open_connection(address.host, address.port, local_addr=(source, 0))


async def waiting(server: srv.EngineServer, n: int) -> None:
    """Until the server counts `n` connections signing in (it takes them as the loop runs)."""
    for _ in range(100_000):
        if sum(server.pending.values()) == n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"the server counts {dict(server.pending)}, not {n}")


async def answer(reader: asyncio.StreamReader) -> protocol.Message:
    return protocol.decode(await reader.readline())


def served(test, **options) -> None:
    """Run `test(server, address)` against a server on a free port of 127.0.0.1."""
    async def main():
        server = srv.EngineServer(TOKEN, **{"log": lambda _: None, **options})
        address = await server.start("127.0.0.1", 0)
        try:
            await test(server, address)
        finally:
            server._server.close()
    asyncio.run(main())


def test_a_third_connection_from_one_address_takes_the_place_of_its_oldest():
    async def check(server, address):
        held = [await connect(address, "127.0.0.2") for _ in range(2)]
        await waiting(server, 2)
        third = await connect(address, "127.0.0.2")
        replaced = await answer(held[0][0])
        assert replaced.kind == "error" and replaced["message"] == (
            "a newer connection took this one's place before it gave the token (at most 8 "
            "wait, 2 from one address)")
        assert await held[0][0].read() == b""  # closed
        other = await connect(address, "127.0.0.3")  # another client is still taken
        await waiting(server, 3)
        assert dict(server.pending) == {"127.0.0.2": 2, "127.0.0.3": 1}
        for _, writer in [*held[1:], third, other]:
            writer.close()
        await waiting(server, 0)  # the slots are given back as they leave
    served(check)


def test_eight_wait_in_all_and_a_ninth_takes_the_place_of_the_first():
    async def check(server, address):
        held = [await connect(address, f"127.0.0.{2 + i // 2}") for i in range(8)]
        await waiting(server, 8)
        ninth = await connect(address, "127.0.0.20")  # kept: a stream dropped is closed
        replaced = await answer(held[0][0])
        assert replaced["message"].startswith("a newer connection took this one's place")
        await waiting(server, 8)
        assert server.pending["127.0.0.20"] == 1 and server.pending["127.0.0.2"] == 1
        for _, writer in [*held, ninth]:
            writer.close()
    served(check)


# An engine that reads its requests and answers none: signing in is all these tests watch.
QUIET_ENGINE = (sys.executable, "-c", "import sys\nfor line in sys.stdin: pass")


async def signed_in(server: srv.EngineServer, n: int) -> None:
    """Until `n` clients are signed in: an engine process starts and ends in its own time,
    so this waits up to a minute (a guard, not a pace)."""
    for _ in range(6000):
        if len(server.relays) == n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(server.relays)} clients signed in, not {n}")


def test_slow_connections_that_reconnect_keep_no_client_of_their_address_out():
    """Behind an SSH tunnel every client has one address: two connections that never sign
    in, reconnecting as each is closed, held both of its slots and kept every client out."""
    async def check(server, address):
        tunnel = "127.0.0.2"
        slow = [await connect(address, tunnel) for _ in range(2)]
        for _ in range(10):  # reconnecting: each new one replaces the oldest waiting
            slow.append(await connect(address, tunnel))
        await waiting(server, 2)
        _, writer = await connect(address, tunnel)
        writer.write(protocol.encode("auth", token=TOKEN))
        await signed_in(server, 1)
        await waiting(server, 1)  # the client's sign-in took the place of a slow one
        assert server.pending[tunnel] == 1
        writer.close()
        await signed_in(server, 0)
    served(check, command=QUIET_ENGINE)


def test_a_flood_of_connections_logs_a_few_lines_and_counts_the_rest():
    """50 connections that never sign in wrote 12,000 log lines in 40 s (tracebacks among
    them): now 5 lines of refusals a window, the rest counted for one line at its end."""
    lines: list[str] = []

    async def check(server, address):
        flood = [await connect(address, "127.0.0.2") for _ in range(50)]
        for reader, _ in flood[:-2]:
            assert (await answer(reader))["message"].startswith("a newer connection took")
        await waiting(server, 2)
        assert len(lines) == 5 and all(line.startswith("refused 127.0.0.2:") for line in lines)
        assert server._refusals.held == 43
        server._refusals.flush()  # as the window ends
        assert lines[-1] == ("43 more refused in the last 10 s (at most 5 are logged each "
                             "10 s)")
    served(check, log=lines.append)


def test_a_nested_first_line_is_refused_in_one_line_and_the_server_goes_on():
    """1,500 `[` then 1,500 `]` before the token closed the connection with no error line
    and logged a traceback (RecursionError inside json.loads)."""
    lines: list[str] = []

    async def check(server, address):
        reader, writer = await connect(address, "127.0.0.2")
        writer.write(b"[" * 1500 + b"]" * 1500 + b"\n")
        refused = await answer(reader)
        assert refused.kind == "error" and "nested more than 64 levels" in refused["message"]
        assert lines == [f"refused {writer.get_extra_info('sockname')[0]}:"
                         f"{writer.get_extra_info('sockname')[1]}: {refused['message']}"]
        reader, writer = await connect(address, "127.0.0.2")
        writer.write(protocol.encode("auth", token=TOKEN))
        await signed_in(server, 1)
        writer.close()
        await signed_in(server, 0)  # its engine ended, before the loop is
    served(check, log=lines.append, command=QUIET_ENGINE)


def test_a_client_that_gives_no_whole_token_in_time_is_closed_and_its_slot_freed():
    """Half a first line keeps no slot past the limit (the whole line must come in time)."""
    async def check(server, address):
        reader, writer = await connect(address, "127.0.0.2")
        writer.write(b'{"v": 1, "msg": "auth", "tok')
        await writer.drain()
        refused = await answer(reader)
        assert refused["message"] == "no token within 0.05 s"
        assert await reader.read() == b""  # closed
        await waiting(server, 0)
    served(check, auth_s=0.05)
