"""What travels to the GPU machine (benchmarks/gpu/carry.py): calls planned under the 64 MiB
budget, files cut into parts and put back together with their SHA-256 checked, one clear line
for a missing or damaged part. Small files and a small budget stand in for the real ones."""

from __future__ import annotations

import io
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks" / "gpu"))
import carry  # benchmarks/gpu is no package

MiB = carry.MiB


def test_calls_fill_in_order_and_split_files_at_the_boundary():
    plan = carry.layout([("sdist", 6), ("wheel", 1), ("model", 98), ("pyside", 21)], 57)
    assert [sum(n for _, _, n in call) for call in plan] == [57, 57, 12]
    assert plan[0] == [("sdist", 0, 6), ("wheel", 0, 1), ("model", 0, 50)]
    assert plan[1] == [("model", 50, 48), ("pyside", 0, 9)]
    assert plan[2] == [("pyside", 9, 12)]


def test_no_part_is_larger_than_the_cap():
    plan = carry.layout([("big", 100)], capacity=1000, part_max=30)
    assert [n for _, _, n in plan[0]] == [30, 30, 30, 10]


def test_a_call_with_the_tree_stays_under_64_mib():
    tree = 5 * MiB
    room = carry.call_capacity(tree)
    assert room + tree + carry.MARGIN == carry.CALL_BUDGET
    for call in carry.layout([("model", 98 * MiB), ("pyside", 21 * MiB)], room):
        assert sum(n for _, _, n in call) + tree <= carry.CALL_BUDGET - carry.MARGIN
    with pytest.raises(ValueError, match="leaves no room"):
        carry.call_capacity(63 * MiB)


def pack(tmp_path: Path, data: bytes, capacity: int, codec: bool = False):
    """A file cut into calls as pack.py does; (manifest, carry folders)."""
    plain = tmp_path / "model.gguf"
    plain.write_bytes(data)
    sent = plain
    if codec:
        sent = tmp_path / "model.gguf.xz"
        sent.write_bytes(lzma.compress(data))
    item = carry.Item(sent.name, "model", sent.stat().st_size, carry.sha256_file(sent))
    if codec:
        item.codec, item.plain_size = "xz", len(data)
        item.plain_sha256 = carry.sha256_file(plain)
    plan = carry.layout([(sent.name, item.size)], capacity)
    out = tmp_path / ".gpu"
    carry.cut({sent.name: sent}, plan, out, {sent.name: item})
    manifest = carry.Manifest([item], [{"call": n} for n in range(1, len(plan) + 1)])
    folders = sorted(out.glob("call*"))
    for folder in folders:
        (folder / carry.MANIFEST).write_text(manifest.to_json())
    return manifest, folders


@pytest.mark.parametrize("codec", [False, True])
def test_parts_are_staged_joined_and_checked(tmp_path, codec):
    data = os.urandom(10_000)
    manifest, folders = pack(tmp_path, data, capacity=4_000, codec=codec)
    assert len(folders) == (1 if codec and len(lzma.compress(data)) <= 4000 else 3)
    staging, dest = tmp_path / "staging", tmp_path / "dest"
    lines = carry.stage_parts(folders, staging)
    assert all(line.startswith("ok") for line in lines)
    done = carry.assemble(manifest.items[0], staging, dest)
    assert done.path.read_bytes() == data and done.line.startswith("ok")
    again = carry.assemble(manifest.items[0], staging, dest)  # idempotent
    assert "already assembled" in again.line


def test_a_missing_part_names_the_call_that_brings_it(tmp_path):
    manifest, folders = pack(tmp_path, os.urandom(10_000), capacity=4_000)
    staging = tmp_path / "staging"
    carry.stage_parts(folders[:1], staging)  # only call 1 arrived
    done = carry.assemble(manifest.items[0], staging, tmp_path / "dest")
    assert done.path is None
    assert done.line == ("MISSING model.gguf: part01, part02 not staged; they come with "
                         "call2, call3")


def test_a_damaged_part_is_one_line_naming_it(tmp_path):
    manifest, folders = pack(tmp_path, os.urandom(10_000), capacity=4_000)
    staging = tmp_path / "staging"
    carry.stage_parts(folders, staging)
    damaged = staging / "model.gguf.part01"
    data = damaged.read_bytes()
    damaged.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])  # b"x" left 1 in 256 intact
    done = carry.assemble(manifest.items[0], staging, tmp_path / "dest")
    assert done.path is None and "\n" not in done.line
    assert done.line.startswith("BAD     model.gguf: SHA-256")
    assert done.line.endswith("damaged part(s): model.gguf.part01")
    assert not list((tmp_path / "dest").iterdir())  # nothing half-made is left


def test_a_part_damaged_in_transit_is_refused_when_staged(tmp_path):
    _, folders = pack(tmp_path, os.urandom(10_000), capacity=4_000)
    part = folders[1] / "model.gguf.part01"
    part.write_bytes(part.read_bytes()[:-1] + b"\0")
    lines = carry.stage_parts(folders, tmp_path / "staging")
    assert [line.split(":")[0] for line in lines if line.startswith("BAD")] == [f"BAD  {part}"]


def test_a_file_built_there_comes_back_in_parts(tmp_path):
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    wheel.write_bytes(os.urandom(2_500))
    parts = carry.split_for_return(wheel, tmp_path / "out", part_max=1_000)
    assert [p.stat().st_size for p in parts] == [1000, 1000, 500]
    back = tmp_path / "back"
    back.mkdir()
    joined = carry.join_returned(tmp_path / "out" / f"{wheel.name}.sha256.json", back)
    assert joined.read_bytes() == wheel.read_bytes()


def test_part_names_are_plain(tmp_path):
    assert carry.safe_name("libx11-6_2%3a1.8.4-2+deb12u2_amd64.deb") == \
        "libx11-6_2_3a1.8.4-2_deb12u2_amd64.deb"


def test_a_debian_package_is_read_without_dpkg(tmp_path):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        for name, body in (("./usr/lib/x86_64-linux-gnu/libfoo.so.1.2", b"ELF"),
                           ("./usr/share/doc/foo/copyright", b"MIT")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("./etc/fonts/conf.d/10-foo.conf")
        link.type, link.linkname = tarfile.SYMTYPE, "/usr/share/fontconfig/10-foo.conf"
        tar.addfile(link)
    deb = tmp_path / "libfoo1_1.2_amd64.deb"
    deb.write_bytes(ar_archive({"debian-binary": b"2.0\n", "data.tar.xz": data.getvalue()}))
    assert carry.deb_sonames(deb) == ["libfoo.so.1.2"]
    carry.unpack_deb(deb, tmp_path / "root")
    assert (tmp_path / "root/usr/lib/x86_64-linux-gnu/libfoo.so.1.2").read_bytes() == b"ELF"
    assert not (tmp_path / "root/etc/fonts/conf.d/10-foo.conf").exists()  # points outside


def ar_archive(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, body in members.items():
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n"
        out += header.encode() + body + (b"\n" if len(body) % 2 else b"")
    return out


def test_stages_and_their_options_may_come_in_any_order():
    """As the rehearsal's commands give them: `test --mark model figures --quick`."""
    import gpu_run

    args = gpu_run.parse_args(["test", "--mark", "model", "figures", "--quick"])
    assert args.stages == ["test", "figures"] and args.mark == "model" and args.quick


def test_a_detached_build_does_not_take_itself_for_a_build_already_running(tmp_path):
    """`build-llama --background` starts gpu_run.py again, detached, and names its pid in
    build.pid as it starts; the detached process, whose command line holds "build-llama" and
    the work folder, must not read that file as a build already running (it ended at once,
    saying "still building", and no build ran)."""
    import subprocess

    code = (
        "import os, sys, types; sys.path.insert(0, sys.argv[1]); import gpu_run; "
        "w = __import__('pathlib').Path(sys.argv[3]); (w / 'build').mkdir(); "
        "(w / 'build' / 'build.pid').write_text(str(os.getpid())); "
        "print(gpu_run.is_building(types.SimpleNamespace(build=w / 'build', work=w)))"
    )
    gpu = Path(__file__).parents[1] / "benchmarks" / "gpu"
    out = subprocess.run([sys.executable, "-c", code, str(gpu), "build-llama", str(tmp_path)],
                         check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False"


def test_the_sdist_is_unpacked_once_and_the_device_build_asks_no_index(tmp_path):
    """A build cut short goes on from its kept folders: the second unpack leaves the source
    as the first build left it. The device has no network, so its pip wheel must not ask an
    index nor make an isolated build environment; here (cuda_wheel.py) it must."""
    sdist = tmp_path / "llama_cpp_python-0.3.36-src.tar.xz"
    with tarfile.open(sdist, "w:xz") as tar:
        data = b"cmake_minimum_required(VERSION 3.21)\n"
        info = tarfile.TarInfo("llama_cpp_python-0.3.36/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    build = tmp_path / "build"
    src = carry.unpack_sdist(sdist, build)
    assert (src / "CMakeLists.txt").read_bytes().startswith(b"cmake_minimum")
    (src / "CMakeLists.txt").write_text("kept")
    assert carry.unpack_sdist(sdist, build) == src
    assert (src / "CMakeLists.txt").read_text() == "kept"

    there = carry.pip_wheel_command(["py"], src, tmp_path / "w", build / "cmake", offline=True)
    here = carry.pip_wheel_command(["py"], src, tmp_path / "w", build / "cmake", offline=False)
    assert {"--no-index", "--no-build-isolation"} <= set(there)
    assert not {"--no-index", "--no-build-isolation"} & set(here)
    assert there[-1] == here[-1] == str(src)
    assert f"--config-settings=build-dir={build / 'cmake'}" in there


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("readelf")),
                    reason="needs gcc and readelf")
def test_the_driver_stub_links_what_a_cuda_library_calls_by_its_versioned_name(tmp_path):
    """The CUDA wheel is built where no driver is installed: the stub stands in for libcuda
    at link time, and must define the versioned symbols cuda.h maps its names to."""
    import cuda_wheel

    include = tmp_path / "include"
    include.mkdir()
    (include / "cuda.h").write_text("#define cuMemAlloc cuMemAlloc_v2\n"
                                    "typedef int CUresult;\n"
                                    "CUresult cuMemAlloc(void **p, unsigned long n);\n"
                                    "CUresult cuGetErrorString(int e, const char **s);\n")
    stub = cuda_wheel.make_driver_stub(include, tmp_path / "stubs")
    user = tmp_path / "user.c"
    user.write_text('#include <cuda.h>\nint f(void) { void *p; return cuMemAlloc(&p, 1); }\n')

    def link(*libs: str) -> subprocess.CompletedProcess:
        return subprocess.run(["gcc", "-shared", "-fPIC", "-I", str(include), str(user),
                               "-Wl,--no-undefined", "-o", str(tmp_path / "libuser.so"), *libs],
                              capture_output=True, text=True)

    assert link().returncode != 0  # cuMemAlloc_v2 unresolved without the stub
    assert link("-L", str(stub.parent), "-lcuda").returncode == 0
    dynamic = subprocess.run(["readelf", "-d", str(tmp_path / "libuser.so")],
                             capture_output=True, text=True).stdout
    assert "[libcuda.so.1]" in dynamic  # what the device's driver provides


def test_the_prebuilt_wheel_is_built_for_the_gpu_and_a_cpu_other_than_this_one():
    import cuda_wheel

    args = cuda_wheel.cmake_args(Path("/tk"))
    assert "-DCMAKE_CUDA_ARCHITECTURES=90-real" in args and "-DGGML_CUDA=on" in args
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args
    assert "-DCMAKE_CUDA_COMPILER=/tk/bin/nvcc" in args


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("readelf")),
                    reason="needs gcc and readelf")
def test_the_slim_wheel_keeps_one_copy_of_what_is_opened_or_needed_and_installs(tmp_path):
    """A wheel cannot hold links, so llama-cpp-python's holds each library under three names
    and twice over; the slim one keeps the names the package opens and the sonames the
    libraries need, with a RECORD pip accepts."""
    import cuda_wheel

    def lib(name: str, soname: str, *needs: Path) -> bytes:
        src = tmp_path / f"{name}.c"
        src.write_text(f"int {name.replace('-', '_')}_f(void) {{ return 1; }}\n")
        out = tmp_path / f"lib{name}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), f"-Wl,-soname,{soname}",
                        "-Wl,--no-as-needed", str(src), *map(str, needs)], check=True)
        return out.read_bytes()

    cuda = lib("ggml-cuda", "libggml-cuda.so.0")
    ggml = lib("ggml", "libggml.so.0", tmp_path / "libggml-cuda.so")
    llama = lib("llama", "libllama.so.0", tmp_path / "libggml.so")
    files = {"llama_cpp/__init__.py": b"", "llama_cpp_python-1.dist-info/METADATA":
             b"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 1\n",
             "llama_cpp_python-1.dist-info/WHEEL":
             b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    for name, data, version in (("ggml-cuda", cuda, "0.25.3"), ("ggml", ggml, "0.25.3"),
                                ("llama", llama, "0.5.0")):
        for suffix in ("", ".0", f".{version}"):
            for folder in ("llama_cpp/lib", "lib"):
                files[f"{folder}/lib{name}.so{suffix}"] = data
    fat = tmp_path / "llama_cpp_python-1-py3-none-any.whl"
    with zipfile.ZipFile(fat, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("llama_cpp_python-1.dist-info/RECORD", "")
    slim = cuda_wheel.slim(fat, tmp_path / "slim" / fat.name)

    names = set(zipfile.ZipFile(slim).namelist())
    assert {n for n in names if "/lib/" in n or n.startswith("lib/")} == {
        "llama_cpp/lib/libllama.so", "llama_cpp/lib/libggml.so",  # opened by name
        "llama_cpp/lib/libggml.so.0", "llama_cpp/lib/libggml-cuda.so.0"}  # needed
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-index", "--target", str(site), str(slim)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (site / "llama_cpp/lib/libggml-cuda.so.0").read_bytes() == cuda


def test_a_test_pass_cut_at_its_cap_still_names_what_failed(tmp_path):
    """pytest writes its junit report only at its end; the GPU's first pass was killed at its
    cap and came back as 'F' marks alone. The verbose log's lines name them."""
    import gpu_run

    log = tmp_path / "tests.log"
    log.write_text(
        "bringing up nodes...\n"
        "[gw0] [  1%] PASSED tests/test_backends.py::test_tiny_greedy_is_repeatable \n"
        "[gw1] [  2%] FAILED tests/test_medusa.py::test_heads_train[cuda] \n"
        "[gw2] [  3%] ERROR tests/test_eagle.py::test_head_loads \n"
        "[gw3] [  4%] SKIPPED tests/test_gpu.py::test_bf16 \n"
        "[gw0] [  5%] PASSED tests/test_session.py::test_every_oracle_is_lossless \n"
    )
    note = gpu_run.cut_counts(log)
    assert note == ("cut short: 2 passed, 2 failed (test_heads_train[cuda], "
                    "test_head_loads)")
    assert gpu_run.cut_counts(tmp_path / "absent.log") == "cut short: 0 passed, 0 failed"


def test_trained_heads_travel_without_their_training_data_and_land_beside_the_model(
        tmp_path, monkeypatch):
    """pack.py --heads carries the EAGLE head and Medusa heads (weights and settings, not the
    cached answers they were trained on); gpu_run unpacks them where the oracles look, once."""
    import types

    import gpu_run
    import pack

    model = tmp_path / "here" / "m.Q4_1.gguf"
    model.parent.mkdir()
    model.write_bytes(b"GGUF")
    for kind, names in pack.HEAD_FILES.items():
        folder = model.parent / f"m.Q4_1.{kind}"
        folder.mkdir()
        for name in (*names, "answers-0123.safetensors"):
            (folder / name).write_text(f"{kind}/{name}")
    built = tmp_path / "built"
    built.mkdir()
    tar_path = pack.heads_tar(model, built)
    with tarfile.open(tar_path) as tar:
        assert sorted(tar.getnames()) == ["m.Q4_1.eagle/config.json",
                                          "m.Q4_1.eagle/model.safetensors",
                                          "m.Q4_1.medusa/heads.safetensors",
                                          "m.Q4_1.medusa/medusa.json"]
    item = carry.Item(tar_path.name, "heads", tar_path.stat().st_size,
                      carry.sha256_file(tar_path))
    run = types.SimpleNamespace(home=tmp_path / "home",
                                manifest=lambda: carry.Manifest([item], [], {}))
    (run.home / "models").mkdir(parents=True)
    monkeypatch.setattr(gpu_run, "assembled", lambda _run, kind: [tar_path] * (kind == "heads"))
    assert len(gpu_run.unpack_heads(run)) == 1
    eagle = run.home / "models" / "m.Q4_1.eagle" / "model.safetensors"
    assert eagle.read_text() == "eagle/model.safetensors"
    assert gpu_run.unpack_heads(run) == []  # once


def test_packing_heads_that_were_never_trained_is_one_line(tmp_path):
    import pack

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(SystemExit, match=r"no eagle head for m\.gguf here"):
        pack.heads_tar(model, tmp_path)


def test_the_sdist_is_trimmed_into_a_folder_not_made_yet(tmp_path):
    """On a fresh machine .gpu/files did not exist and cuda_wheel.py stopped at the trim."""
    import pack

    src = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(src, "w:gz") as tar:
        for name in ("pkg-1.0/keep.c", "pkg-1.0/vendor/docs/big.md"):
            data = name.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "not" / "made" / "pkg.tar.xz"
    pack.trim_tar(src, out, ("vendor/docs/",))
    with tarfile.open(out, "r:xz") as tar:
        assert tar.getnames() == ["pkg-1.0/keep.c"]
