"""A Python here that has only what the GPU machine's image has, for rehearsing gpu_run.py.

The device image lacks llama-cpp-python, gguf, PySide6, pyqtgraph, psygnal, qasync,
platformdirs (carry.DEVICE_PACKAGES lists what it has) and holds older transformers and
huggingface_hub than this machine. A rehearsal in this machine's own Python would find every
package installed and prove nothing; this one sees this machine's packages that the device
also has (linked, nothing copied) and the device's versions of transformers, huggingface_hub
and tokenizers (the only downloads). Then `gpu_run.py install` must bring in the rest from
the carried wheels, as it must there.

    python benchmarks/gpu/mimic_device.py            # makes /tmp/specviz-mimic/venv
    /tmp/specviz-mimic/venv/bin/python benchmarks/gpu/gpu_run.py --device cpu ...
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import carry  # beside this script

# The device's versions where they differ from this machine's (KINDS.md's pip list, 2026-11),
# and llama-cpp-python's build backend, scikit-build-core, with pathspec: the device has them,
# this machine has not (their versions there are not recorded: the latest here).
DEVICE_VERSIONS = ("transformers==5.17.0", "huggingface_hub==1.33.0", "tokenizers==0.23.2",
                   "scikit-build-core", "pathspec")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path("/tmp/specviz-mimic"))
    args = p.parse_args()
    env_dir, base = args.root / "venv", args.root / "base"
    if not (env_dir / "bin" / "python").exists():
        venv.create(env_dir, with_pip=True)  # ensurepip: no network needed
    linked, left_out = link_device_packages(base)
    site = Path(subprocess.run([env_dir / "bin" / "python", "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "device-base.pth").write_text(f"{base}\n", encoding="utf-8")  # after the venv's own
    subprocess.run([env_dir / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", *DEVICE_VERSIONS], check=True)
    print(f"{env_dir}/bin/python: {linked} of this machine's distributions linked; left out "
          f"(the device lacks them): {', '.join(sorted(left_out))}")


def link_device_packages(base: Path) -> tuple[int, set[str]]:
    """Link into `base` the top-level modules and metadata of every distribution installed
    here that the device has too."""
    site = Path(sysconfig.get_paths()["purelib"])
    base.mkdir(parents=True, exist_ok=True)
    for old in base.iterdir():
        old.unlink()
    linked, left_out = 0, set()
    for dist in md.distributions():
        name = carry.canonical(dist.metadata["Name"])
        if name not in carry.DEVICE_PACKAGES:
            left_out.add(name)
            continue
        linked += 1
        for top in top_levels(dist, site):
            target = base / top
            if not target.exists() and (site / top).exists():
                target.symlink_to(site / top)
    return linked, left_out


def top_levels(dist: md.Distribution, site: Path) -> set[str]:
    """The names a distribution puts directly in site-packages (no scripts, no .pth files)."""
    tops = set()
    for f in dist.files or ():
        parts = Path(f).parts
        if parts and parts[0] != ".." and not parts[0].endswith(".pth") \
                and parts[0] != "__pycache__":
            tops.add(parts[0])
    return tops


if __name__ == "__main__":
    main()
