"""The system libraries Qt needs to open a window on Linux, checked before Qt is loaded.

PySide6's wheels carry Qt itself but not the system's X11/xcb, EGL, fontconfig and D-Bus
libraries. A bare Linux lacks some of them, and Qt then aborts the process with "Could not
load the Qt platform plugin "xcb"", naming none. So before Qt loads, specviz asks the dynamic
linker (`ldd`) what the installed Qt libraries and platform plugin link and cannot find, and
names those with the one command that installs them on this distribution. Where `ldd` is
missing, each library of the table below is tried with dlopen instead.

Nothing here imports Qt: this module is how the app decides whether it may.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

# soname -> package (Debian/Ubuntu, Fedora, Arch). What Qt's "X11 requirements" page lists,
# checked against `ldd` of PySide6-Essentials' QtGui, QtWidgets, QtDBus and the xcb plugin
# (tests/test_display_libs.py keeps the two in step). Debian's names are bookworm's; newer
# releases provide them too (as virtual packages where a t64 rename happened).
PACKAGES: dict[str, tuple[str, str, str]] = {
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd"),
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx", "libglvnd"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl", "libglvnd"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd", "libglvnd"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11"),
    "libXau.so.6": ("libxau6", "libXau", "libxau"),
    "libXdmcp.so.6": ("libxdmcp6", "libXdmcp", "libxdmcp"),
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil",
                                "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb", "libxcb"),
}

# What each part links (used where ldd is missing): Qt's GUI and widget libraries on any
# platform, and the xcb plugin on top of them.
GUI_LIBS = ("libEGL.so.1", "libGL.so.1", "libxkbcommon.so.0", "libfontconfig.so.1",
            "libfreetype.so.6", "libglib-2.0.so.0", "libdbus-1.so.3")
XCB_LIBS = ("libX11.so.6", "libX11-xcb.so.1", "libxkbcommon-x11.so.0", "libxcb.so.1",
            "libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-image.so.0",
            "libxcb-keysyms.so.1", "libxcb-render-util.so.0", "libxcb-randr.so.0",
            "libxcb-render.so.0", "libxcb-shape.so.0", "libxcb-shm.so.0", "libxcb-sync.so.1",
            "libxcb-xfixes.so.0", "libxcb-xkb.so.1", "libxcb-util.so.1")

INSTALLERS = {"apt": "sudo apt-get install", "dnf": "sudo dnf install", "pacman": "sudo pacman -S"}
_FAMILIES = {"debian": "apt", "ubuntu": "apt", "fedora": "dnf", "rhel": "dnf", "centos": "dnf",
             "arch": "pacman"}
_COLUMN = {"apt": 0, "dnf": 1, "pacman": 2}


@dataclass(frozen=True)
class Check:
    """What the window would miss on this machine (empty `missing`: it can start)."""

    platform: str  # "xcb", or the platform Qt was told to use
    missing: tuple[str, ...]  # sonames
    how: str  # "ldd" or "dlopen": how the libraries were looked for
    installer: str | None  # "apt", "dnf", "pacman", or None when the distribution is unknown

    @property
    def ok(self) -> bool:
        return not self.missing

    def packages(self) -> list[str]:
        if self.installer is None:
            return []
        column = _COLUMN[self.installer]
        return sorted({PACKAGES[s][column] for s in self.missing if s in PACKAGES})

    def advice(self) -> str:
        """One line: which libraries are missing, and the command that installs them."""
        named = ", ".join(self.missing)
        packages = self.packages()
        unknown = [s for s in self.missing if s not in PACKAGES]
        line = f"the window needs system libraries that are missing here ({named}); "
        if not packages:
            return line + "install them with your distribution's package manager"
        line += f"install them with: {INSTALLERS[self.installer]} {' '.join(packages)}"
        if unknown:
            line += f" (and whatever provides {', '.join(unknown)})"
        return line


def platform_wanted(env: dict[str, str]) -> str:
    """The Qt platform plugin a window would load: the one asked for, else xcb on Linux
    (Qt tries Wayland first in a Wayland session and falls back to xcb)."""
    asked = env.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    return asked or "xcb"


def check(env: dict[str, str] | None = None, *, ldd: Callable[[Path], str] | None = None,
          qt_dir: Path | None = None, os_release: str | None = None,
          dlopen: Callable[[str], bool] | None = None, has_ldd: bool | None = None) -> Check:
    """The libraries missing for a window on this Linux machine; each fact can be injected
    (`has_ldd=False` checks with dlopen, as on a machine without ldd)."""
    env = dict(os.environ) if env is None else env
    wanted = platform_wanted(env)
    qt_dir = qt_dir or pyside_qt_dir()
    installer = installer_for(read_os_release() if os_release is None else os_release)
    if has_ldd is None:
        has_ldd = shutil.which("ldd") is not None
    if ldd is None and has_ldd:
        ldd = run_ldd
    if has_ldd and ldd is not None and qt_dir is not None:
        files = qt_files(qt_dir, wanted)
        missing = not_found(ldd(f) for f in files if f.exists())
        return Check(wanted, tuple(missing), "ldd", installer)
    names = GUI_LIBS + (XCB_LIBS if wanted == "xcb" else ())
    loads = dlopen or _loads
    return Check(wanted, tuple(s for s in names if not loads(s)), "dlopen", installer)


def needed() -> bool:
    """Whether the check applies: Linux only (macOS and Windows bring their own)."""
    return sys.platform.startswith("linux")


def pyside_qt_dir() -> Path | None:
    """PySide6's Qt folder, found without importing PySide6 (which would load Qt)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    qt = Path(next(iter(spec.submodule_search_locations))) / "Qt"
    return qt if qt.is_dir() else None


def qt_files(qt_dir: Path, platform: str) -> list[Path]:
    """The Qt libraries a window loads, and the platform plugin for `platform`."""
    libs = [qt_dir / "lib" / f"libQt6{name}.so.6" for name in ("Gui", "Widgets", "DBus")]
    plugin = qt_dir / "plugins" / "platforms" / f"libq{platform}.so"
    return [*libs, plugin]


def run_ldd(path: Path) -> str:
    try:
        done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout


def not_found(outputs: Iterable[str]) -> list[str]:
    """Sonames that `ldd` printed as "not found", in order, each once."""
    missing: list[str] = []
    for output in outputs:
        for line in output.splitlines():
            name, _, where = line.strip().partition("=>")
            if where.strip() == "not found" and name.strip() not in missing:
                missing.append(name.strip())
    return missing


def linked(outputs: Iterable[str]) -> set[str]:
    """Every soname `ldd` printed, found or not (the test compares them with the table)."""
    names = set()
    for output in outputs:
        for line in output.splitlines():
            name, arrow, _ = line.strip().partition("=>")
            if arrow:
                names.add(name.strip())
    return names


def read_os_release() -> str:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return ""


def installer_for(os_release: str) -> str | None:
    """apt, dnf or pacman from /etc/os-release's ID and ID_LIKE; None when none applies."""
    fields = {}
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        fields[key.strip()] = value.strip().strip('"').lower()
    for distro in [fields.get("ID", ""), *fields.get("ID_LIKE", "").split()]:
        if distro in _FAMILIES:
            return _FAMILIES[distro]
    return None


def _loads(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True
