"""The window's system-library check: what it says for injected facts, and that its table and
the README's install line keep up with what the installed Qt really links."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specviz.engines.machine import display_libs as dl

README = Path(__file__).resolve().parents[1] / "README.md"

LDD_MISSING = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibQt6XcbQpa.so.6 => /x/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibX11.so.6 => /lib/x86_64-linux-gnu/libX11.so.6 (0x00007f)
"""
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
UBUNTU = "ID=ubuntu\nID_LIKE=debian\n"
FEDORA = 'ID=fedora\nVERSION_ID=41\n'
ROCKY = 'ID="rocky"\nID_LIKE="rhel centos fedora"\n'
MANJARO = "ID=manjaro\nID_LIKE=arch\n"
ALPINE = "ID=alpine\n"


def fake_qt(tmp_path: Path) -> Path:
    """A Qt folder with the files the check looks at (their contents do not matter: ldd is
    injected)."""
    for rel in ("lib/libQt6Gui.so.6", "lib/libQt6Widgets.so.6", "lib/libQt6DBus.so.6",
                "plugins/platforms/libqxcb.so", "plugins/platforms/libqoffscreen.so"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    return tmp_path


def ldd_for(outputs: dict[str, str]):
    return lambda path: outputs.get(path.name, "")


def test_missing_xcb_libraries_are_named_with_the_apt_command(tmp_path):
    found = dl.check({}, ldd=ldd_for({"libqxcb.so": LDD_MISSING}), qt_dir=fake_qt(tmp_path),
                     os_release=DEBIAN, has_ldd=True)
    assert found.missing == ("libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    assert found.how == "ldd"
    line = found.advice()
    assert "\n" not in line
    assert line.endswith("sudo apt-get install libxcb-icccm4 libxcb-keysyms1")


@pytest.mark.parametrize(("release", "command"), [
    (UBUNTU, "sudo apt-get install libxcb-icccm4 libxcb-keysyms1"),
    (FEDORA, "sudo dnf install xcb-util-keysyms xcb-util-wm"),
    (ROCKY, "sudo dnf install xcb-util-keysyms xcb-util-wm"),
    (MANJARO, "sudo pacman -S xcb-util-keysyms xcb-util-wm"),
])
def test_the_command_follows_the_distribution(tmp_path, release, command):
    found = dl.check({}, ldd=ldd_for({"libqxcb.so": LDD_MISSING}), qt_dir=fake_qt(tmp_path),
                     os_release=release, has_ldd=True)
    assert found.advice().endswith(command)


def test_an_unknown_distribution_gets_the_libraries_named(tmp_path):
    found = dl.check({}, ldd=ldd_for({"libqxcb.so": LDD_MISSING}), qt_dir=fake_qt(tmp_path),
                     os_release=ALPINE, has_ldd=True)
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in found.advice()
    assert "package manager" in found.advice()


def test_a_library_outside_the_table_is_still_named(tmp_path):
    odd = "\tlibxcb-icccm.so.4 => not found\n\tlibfancy.so.9 => not found\n"
    found = dl.check({}, ldd=ldd_for({"libqxcb.so": odd}), qt_dir=fake_qt(tmp_path),
                     os_release=DEBIAN, has_ldd=True)
    assert found.advice().endswith("libxcb-icccm4 (and whatever provides libfancy.so.9)")


def test_another_platform_does_not_need_the_xcb_plugin(tmp_path):
    ldd = ldd_for({"libqxcb.so": LDD_MISSING})
    found = dl.check({"QT_QPA_PLATFORM": "offscreen"}, ldd=ldd, qt_dir=fake_qt(tmp_path),
                     os_release=DEBIAN, has_ldd=True)
    assert found.ok and found.platform == "offscreen"
    # Qt's own libraries are needed on every platform.
    gui = {"libQt6Gui.so.6": "\tlibEGL.so.1 => not found\n"}
    found = dl.check({"QT_QPA_PLATFORM": "offscreen"}, ldd=ldd_for(gui),
                     qt_dir=fake_qt(tmp_path), os_release=DEBIAN, has_ldd=True)
    assert found.missing == ("libEGL.so.1",)
    assert found.advice().endswith("sudo apt-get install libegl1")


def test_without_ldd_each_library_is_tried(tmp_path):
    tried = []

    def dlopen(name: str) -> bool:
        tried.append(name)
        return name != "libxcb-keysyms.so.1"

    found = dl.check({}, qt_dir=fake_qt(tmp_path), os_release=DEBIAN, dlopen=dlopen,
                     has_ldd=False)
    assert found.how == "dlopen" and found.missing == ("libxcb-keysyms.so.1",)
    assert set(dl.GUI_LIBS) | set(dl.XCB_LIBS) == set(tried)
    tried.clear()
    dl.check({"QT_QPA_PLATFORM": "wayland"}, qt_dir=fake_qt(tmp_path), os_release=DEBIAN,
             dlopen=dlopen, has_ldd=False)
    assert set(tried) == set(dl.GUI_LIBS)


def test_platform_wanted_reads_qt_s_own_variable():
    assert dl.platform_wanted({}) == "xcb"
    assert dl.platform_wanted({"QT_QPA_PLATFORM": "xcb:display=:1"}) == "xcb"
    assert dl.platform_wanted({"QT_QPA_PLATFORM": "wayland;xcb"}) == "wayland"


def test_the_window_command_stops_with_one_line(monkeypatch, capsys, tmp_path):
    """`specviz` with libraries missing: one line from specviz, exit 2, before Qt loads."""
    from specviz.app import qt_app
    from specviz.app.cli import main as cli

    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("SPECVIZ_SKIP_LIB_CHECK", raising=False)
    broken = dl.Check("xcb", ("libxcb-icccm.so.4",), "ldd", "apt")
    monkeypatch.setattr(dl, "check", lambda: broken)
    monkeypatch.setattr(dl, "needed", lambda: True)
    assert cli.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["specviz: " + broken.advice()]
    assert qt_app.has_display()


# ------------------------------------------------------------ the real Qt on this machine

C_RUNTIME = re.compile(r"^(ld-linux.*|linux-vdso.*|lib(c|m|dl|pthread|rt|gcc_s|stdc\+\+|z|zstd)"
                       r"\.so\..*)$")


def _direct_needs(qt_dir: Path) -> set[str]:
    """Every library the Qt files of a window (and the Qt libraries they pull in) name as
    DT_NEEDED, other than Qt's own and the C runtime's."""
    files = dl.qt_files(qt_dir, "xcb")
    closure = set(files)
    for f in files:
        for line in dl.run_ldd(f).splitlines():
            _, _, where = line.partition("=>")
            path = Path(where.strip().split(" (")[0]) if "=>" in line else None
            if path and str(path).startswith(str(qt_dir)):
                closure.add(path.resolve())
    needs = set()
    for f in closure:
        out = subprocess.run(["readelf", "-d", str(f)], capture_output=True, text=True).stdout
        needs |= set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out))
    own = {p.name for p in qt_dir.rglob("*.so*")}
    return {n for n in needs if n not in own and not C_RUNTIME.match(n)}


@pytest.mark.skipif(not (shutil.which("ldd") and shutil.which("readelf") and dl.needed()
                         and dl.pyside_qt_dir()), reason="needs Linux, ldd, readelf, PySide6")
def test_the_table_and_the_readme_cover_what_qt_links():
    needs = _direct_needs(dl.pyside_qt_dir())
    assert needs, "readelf found nothing: the check would be empty"
    assert needs <= set(dl.PACKAGES), f"not in display_libs.PACKAGES: {needs - set(dl.PACKAGES)}"
    assert needs <= set(dl.GUI_LIBS) | set(dl.XCB_LIBS) | {"libgthread-2.0.so.0"}
    readme = README.read_text(encoding="utf-8")
    line = re.search(r"apt-get install ([^`]+)```", readme)
    assert line, "the README names no apt-get line for the window's libraries"
    listed = {word for word in line.group(1).split() if word.startswith("lib")}
    wanted = {dl.PACKAGES[n][0] for n in needs}
    assert wanted <= listed, f"README's apt-get line lacks {sorted(wanted - listed)}"
