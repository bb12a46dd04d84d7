"""`specviz serve` keeps a client to what the host allows. The real command in a subprocess,
spoken to over a plain socket by a client holding the token: every file a run names other than
its models must lie under the server's cache or a folder given with --allow (links and `..`
resolved first), else one `error` naming the field, with the host's files as they were;
models are read as models only, never echoed; connections before the token are capped in
number, size and memory; the token file replaces a link instead of following it; listening on
every interface needs --all-interfaces."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from serve_client import Conn, start_serve, stop

from specviz.engines.host import relay as srv
from specviz.engines.host import run_spec as rs

SECRET = "TOPSECRET-4f1c: the host's own words"
# Each path field, the oracle that reads it and what it names on the host.
FIELDS = {
    "ngram_corpus": ("ngram", "corpus.txt"),
    "suffix_corpus": ("suffix", "corpus.txt"),
    "suffix_memory": ("suffix", "memory.jsonl"),
    "medusa_heads": ("medusa", "heads"),
    "eagle_head": ("eagle", "heads"),
}


def fill(folder: Path) -> Path:
    """A corpus (0600), an existing suffix memory and a heads folder, as a host keeps them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.txt").write_text(f"{SECRET}\n" * 8)
    (folder / "corpus.txt").chmod(0o600)
    (folder / "memory.jsonl").write_text(json.dumps({"precious": SECRET}) + "\n")
    (folder / "heads").mkdir(exist_ok=True)
    (folder / "heads" / "config.json").write_text(json.dumps({"name": SECRET}))
    (folder / "heads" / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def snapshot(folder: Path) -> dict:
    """Every entry under `folder`: its bytes, mtime and mode (a `.corrupt` sibling shows)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            stat = path.lstat()
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            found[str(path.relative_to(folder))] = (data, stat.st_mtime_ns, stat.st_mode)
    return found


@pytest.fixture(scope="module")
def host(tmp_path_factory, tiny_model_dir):
    """A served host: its cache (SPECVIZ_HOME), a folder given with --allow, a folder of its
    own outside both, and links from the cache out of it and into the allowed folder."""
    root = tmp_path_factory.mktemp("host")
    home, allowed, outside = fill(root / "home"), fill(root / "allowed"), fill(root / "outside")
    (home / "escape").symlink_to(outside, target_is_directory=True)
    (home / "to-allowed").symlink_to(allowed, target_is_directory=True)
    proc, address = start_serve(home, home / "token", "--allow", str(allowed))
    token = (home / "token").read_text().strip()
    yield {"root": root, "home": home, "allowed": allowed, "outside": outside,
           "address": address, "token": token, "model": tiny_model_dir, "proc": proc}
    stop(proc)


@pytest.fixture(scope="module")
def client(host):
    """One signed-in client for the whole module: a refusal keeps the connection."""
    conn = Conn(host["address"])
    conn.send("auth", token=host["token"])
    assert conn.next().kind == "hello"
    yield conn
    conn.send("shutdown")
    conn.close()


def run_spec(host, field: str | None = None, value: str | None = None,
             target: str | None = None, **lane) -> dict:
    """A one-lane run of the tiny model; `field` set to `value` on the lane of its oracle."""
    lane = {"oracle": "none", "k": 2, "suffix_memory": "off", **lane}
    if field:
        lane.update({"oracle": FIELDS[field][0], field: value})
    return rs.to_dict(rs.RunSpec(
        rs.RunRequest("def add(a, b):\n    return a + b\n", rs.ModelChoice(
            target or str(host["model"]), "transformers", "cpu", 1), max_tokens=4, chat=False),
        {"a": rs.lane_from_dict(lane)}))


def named(host, form: str, field: str) -> str:
    """The path of `field`'s host file, spelled as `form`."""
    name = FIELDS[field][1]
    return {"outside": str(host["outside"] / name),
            "link out": str(host["home"] / "escape" / name),
            "dot-dot": f"{host['home']}/../outside/{name}",
            "home": str(host["home"] / name),
            "allowed": str(host["allowed"] / name),
            "link in": str(host["home"] / "to-allowed" / name)}[form]


# ------------------------------------------------------------ confinement of path fields


@pytest.mark.parametrize("form", ["outside", "link out", "dot-dot"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_file_outside_the_allowed_folders_is_refused_untouched(host, client, field, form):
    before = snapshot(host["root"])
    value = named(host, form, field)
    client.send("run", spec=run_spec(host, field, value))
    refused = client.next()
    assert refused.kind == "error" and refused["request"] == "run", refused
    assert refused["message"] == (f"run: lane 'a' {field} {value} is outside the folders this "
                                  "server allows (its cache, --allow DIR)")
    assert SECRET not in json.dumps(refused.fields)
    assert snapshot(host["root"]) == before  # same bytes, same mtimes, no `.corrupt`


@pytest.mark.parametrize("form", ["home", "allowed", "link in"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_file_inside_the_allowed_folders_reaches_the_engine(host, client, field, form):
    value = named(host, form, field)
    if field == "suffix_memory":  # a memory of its own, begun by this run
        value = value.replace("memory.jsonl", f"new-{form.replace(' ', '-')}.jsonl")
    outside = snapshot(host["outside"])
    client.send("run", spec=run_spec(host, field, value))
    replies = client.until("done")
    assert not [m for m in replies if m.kind == "error"], replies
    failed = [m["message"] for m in replies if m.kind == "failed"]
    if field in ("ngram_corpus", "suffix_corpus", "suffix_memory"):
        assert not failed and any(m.kind == "started" for m in replies), failed
    else:  # the heads there are not real ones: the engine says so, with the resolved path
        assert failed and str(Path(os.path.realpath(value))) in failed[0], failed
    if field == "suffix_memory":
        assert Path(os.path.realpath(value)).is_file()
    assert snapshot(host["outside"]) == outside


def test_refusals_leave_the_connection_and_the_server_up(host, client):
    client.send("run", spec=run_spec(host, "suffix_memory", str(host["outside"] / "x.jsonl")))
    assert client.next().kind == "error"
    assert not (host["outside"] / "x.jsonl").exists()
    client.send("run", spec=run_spec(host))
    assert client.until("done")[-1].kind == "done"


# ------------------------------------------------------------ models: read as models only


@pytest.mark.parametrize("role", ["target", "draft", "cross_draft"])
def test_a_model_that_is_a_host_text_file_is_refused_without_its_contents(host, client, role):
    secret = str(host["outside"] / "corpus.txt")
    named = {"target": {"target": secret}, "draft": {"oracle": "draft", "draft": secret},
             "cross_draft": {"oracle": "cross-draft", "draft": str(host["model"]),
                             "cross_draft": secret}}[role]
    client.send("run", spec=run_spec(host, **named))
    replies = client.until("done")
    failed = [m["message"] for m in replies if m.kind == "failed"]
    assert failed and "is neither a .gguf file nor a Hugging Face model folder" in failed[0]
    assert SECRET not in json.dumps([m.fields for m in replies], default=str)


def test_a_hostile_pickled_head_runs_no_code(host, client, tmp_path):
    """An EAGLE head's pickled weights are read as tensors only (torch.load weights_only)."""
    import torch

    marker = host["root"] / "pwned"
    config = json.loads((Path(host["model"]) / "config.json").read_text())
    heads = host["allowed"] / "evil-head"
    heads.mkdir()
    (heads / "config.json").write_text(json.dumps({
        key: config[key] for key in ("hidden_size", "num_attention_heads", "intermediate_size",
                                     "num_key_value_heads", "vocab_size")}))
    torch.save(Evil(str(marker)), heads / "pytorch_model.bin")
    client.send("run", spec=run_spec(host, "eagle_head", str(heads)))
    failed = [m["message"] for m in client.until("done") if m.kind == "failed"]
    assert failed and "cannot read the EAGLE head's weights" in failed[0], failed
    assert not marker.exists()


class Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


# ------------------------------------------------------------ before the token


def test_connections_before_the_token_are_capped_in_number(host):
    """Eight in all, from four clients holding two each (one client holds at most two:
    tests/test_serve_slots.py); one more, from a fifth, takes the place of the one waiting
    longest, which is closed with one line; a client with the token still signs in."""
    assert (srv.MAX_PENDING, srv.MAX_PENDING_PER_HOST) == (8, 2)  # the numbers promised
    waiting = [Conn(host["address"], f"127.0.0.{1 + i // 2}") for i in range(srv.MAX_PENDING)]
    extra = Conn(host["address"], "127.0.0.20")
    replaced = waiting[0].next()
    assert replaced.kind == "error" and replaced["message"].startswith(
        "a newer connection took this one's place"), replaced
    assert waiting[0].next() is None
    conn = signed_in_within(host, 60.0)  # the token decides, whoever holds the slots
    conn.send("shutdown")
    conn.close()
    for other in [*waiting, extra]:
        other.close()


def signed_in_within(host, seconds: float) -> Conn:
    deadline = time.monotonic() + seconds
    while True:
        conn = Conn(host["address"])
        conn.send("auth", token=host["token"])
        reply = conn.next()
        if reply.kind == "hello":
            return conn
        conn.close()
        assert time.monotonic() < deadline, reply
        time.sleep(0.1)


def test_the_first_line_is_capped_in_size_and_what_follows_the_token_is_not(host):
    conn = Conn(host["address"])
    conn.raw(b"x" * (srv.AUTH_LINE + 1))  # no newline yet: the server need not wait for one
    refused = conn.next()
    # A server that waited for the newline would refuse only after AUTH_S, saying "no token
    # within": this reason can only come from the size, before any newline.
    assert refused.kind == "error" and "under 4096 bytes" in refused["message"], refused
    assert conn.next() is None
    conn = Conn(host["address"])  # the token, then a long line in the same burst
    long_line = json.dumps({"v": 1, "msg": "set_k", "lane": "a" * 100_000, "k": "x"})
    conn.raw(json.dumps({"v": 1, "msg": "auth", "token": host["token"]}).encode() + b"\n"
             + long_line.encode() + b"\n")
    replies = {m.kind: m for m in (conn.next(), conn.next())}  # the relay may answer first
    assert "hello" in replies and "'k' must be int" in replies["error"]["message"], replies
    conn.send("shutdown")
    conn.close()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_fifty_floods_before_the_token_cost_the_server_no_memory(tmp_path):
    """The issue's case: 50 connections sending 4 MB each took the server from 52 to 254 MB,
    not given back once they had gone."""
    proc, address = start_serve(tmp_path, tmp_path / "token")
    try:
        time.sleep(0.5)
        before = rss_kb(proc.pid)
        socks: list[socket.socket] = []
        # From 25 client addresses: every sign-in slot is taken, not only one client's two.
        threads = [threading.Thread(target=flood, args=(address, 4 << 20, socks,
                                                        f"127.0.0.{1 + i // 2}"))
                   for i in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        time.sleep(0.5)
        flooded = rss_kb(proc.pid)
        for sock in socks:
            sock.close()
        time.sleep(1.0)
        after = rss_kb(proc.pid)
        grown = f"{before} kB, flooded {flooded} kB, after {after} kB"
        assert max(flooded, after) - before < 16 << 10, grown
    finally:
        stop(proc)


def flood(address: srv.Address, size: int, socks: list[socket.socket], source: str) -> None:
    """`size` bytes without a newline from `source`, the connection then left open."""
    sock = socket.create_connection((address.host, address.port), timeout=30,
                                    source_address=(source, 0))
    socks.append(sock)
    try:
        sock.sendall(b"x" * size)
    except OSError:
        pass  # refused and closed mid-flood, as it should be


# ------------------------------------------------------------ the token file, the address


def test_the_token_file_replaces_a_link_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the host's file\n")
    victim.chmod(0o644)
    stat = victim.stat()
    link = tmp_path / "token"
    link.symlink_to(victim)
    proc, _ = start_serve(tmp_path / "home", link)
    stop(proc)
    assert victim.read_text() == "the host's file\n"
    assert (victim.stat().st_mode & 0o777, victim.stat().st_mtime_ns) == (
        0o644, stat.st_mtime_ns)
    assert not link.is_symlink() and link.stat().st_mode & 0o777 == 0o600
    assert len(link.read_text().strip()) >= 32


def specviz(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specviz", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("address", ["", "0.0.0.0", "::", "0"])
def test_every_interface_needs_its_flag(address):
    done = specviz("serve", "--host", address, "--port", "0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specviz: --host"), done.stderr
    assert "--all-interfaces" in lines[0] and not done.stdout


def test_with_the_flag_every_interface_is_served(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "specviz", "serve", "--host", "0.0.0.0", "--all-interfaces",
         "--port", "0", "--token-file", str(tmp_path / "token")], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env={**os.environ, "SPECVIZ_HOME": str(tmp_path)})
    try:
        assert "listening on 0.0.0.0:" in proc.stdout.readline().decode()
    finally:
        stop(proc)


def test_an_allowed_folder_must_exist(tmp_path):
    done = specviz("serve", "--port", "0", "--allow", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"specviz: --allow {tmp_path / 'missing'}: no such folder"
