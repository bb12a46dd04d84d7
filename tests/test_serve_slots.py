"""`specviz serve`'s sign-in slots, on a real server in this process: at most 8 connections
wait to sign in, at most 2 of them from one client address (so one client cannot hold every
slot), and each gets 10 s to give the token. The tests wait for no clock: they watch the
server's own count of waiting connections, and the 10 s limit is given short here."""

from __future__ import annotations

import asyncio

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
        server = srv.EngineServer(TOKEN, log=lambda _: None, **options)
        address = await server.start("127.0.0.1", 0)
        try:
            await test(server, address)
        finally:
            server._server.close()
    asyncio.run(main())


def test_one_client_holds_at_most_two_slots_and_others_still_sign_in():
    async def check(server, address):
        held = [await connect(address, "127.0.0.2") for _ in range(2)]
        await waiting(server, 2)
        reader, _ = await connect(address, "127.0.0.2")
        refused = await answer(reader)
        assert refused.kind == "error" and refused["message"] == (
            "busy: 2 connections from 127.0.0.2 are signing in, the most from one address")
        other = await connect(address, "127.0.0.3")  # another client is still taken
        await waiting(server, 3)
        assert dict(server.pending) == {"127.0.0.2": 2, "127.0.0.3": 1}
        for _, writer in [*held, other]:
            writer.close()
        await waiting(server, 0)  # the slots are given back as they leave
    served(check)


def test_eight_wait_in_all_and_a_ninth_is_refused():
    async def check(server, address):
        held = [await connect(address, f"127.0.0.{2 + i // 2}") for i in range(8)]
        await waiting(server, 8)
        reader, _ = await connect(address, "127.0.0.20")
        refused = await answer(reader)
        assert refused["message"] == ("busy: 8 connections are signing in, the most this "
                                      "server waits for")
        for _, writer in held:
            writer.close()
        await waiting(server, 0)
    served(check)


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
