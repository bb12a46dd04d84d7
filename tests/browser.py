"""Headless Chromium for the exported page's tests: screenshots and the DOM after scripts ran.

Debian's `chromium` package; where it is missing the browser tests are skipped with the
reason. CI installs it before the tests (needs root, or sudo):

    python tests/browser.py --install
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ENV = "SPECVIZ_CHROMIUM"  # a Chromium binary to use instead of the one on PATH
NAMES = ("chromium", "chromium-browser")
TIMEOUT_S = 120
# Scripts get this much virtual time before the screenshot or the dump: the page draws on
# load, so it is done long before.
BUDGET_MS = 2000


def binary() -> Path | None:
    if os.environ.get(ENV):
        path = Path(os.environ[ENV])
        return path if path.is_file() else None
    found = next((shutil.which(name) for name in NAMES if shutil.which(name)), None)
    return Path(found) if found else None


def install() -> Path:
    """apt-get install chromium (a package list refreshed first if the install fails)."""
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    install_cmd = [*sudo, "apt-get", "install", "-y", "chromium"]
    if subprocess.run(install_cmd).returncode != 0:
        subprocess.run([*sudo, "apt-get", "update"], check=True)
        subprocess.run(install_cmd, check=True)
    path = binary()
    if path is None:
        raise SystemExit("apt-get finished, but no chromium is on PATH")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Chromium headless with its own throwaway profile (a second browser running at the same
    time, or a crashed one's lock, cannot get in the way)."""
    path = binary()
    if path is None:
        raise RuntimeError("no chromium (python tests/browser.py --install)")
    with tempfile.TemporaryDirectory(prefix="specviz-chromium-") as profile:
        return subprocess.run(
            [str(path), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}",
             f"--virtual-time-budget={BUDGET_MS}", *args],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=True)


def screenshot(url: str, png: Path, size: tuple[int, int] = (1280, 900)) -> Path:
    run(f"--screenshot={png}", f"--window-size={size[0]},{size[1]}", url)
    return png


def dump_dom(url: str) -> str:
    """The page's DOM as HTML after its scripts ran."""
    return run("--dump-dom", url).stdout


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="install it if it is missing")
    args = parser.parse_args()
    found = binary()
    if found is None and args.install:
        try:
            found = install()
        except (OSError, subprocess.CalledProcessError, SystemExit) as exc:
            # A person without root still gets the rest of the suite; CI must not skip them.
            if os.environ.get("CI") == "true":
                raise
            print(f"could not install chromium ({exc}): the browser tests will be skipped")
    print(found or "not installed (python tests/browser.py --install)")
