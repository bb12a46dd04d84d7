"""Writing an export all or nothing: a reader never sees half a file, a failure leaves none."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...engines.errors import SpecvizError


@contextmanager
def written_atomically(out: Path) -> Iterator[Path]:
    """A temporary path beside `out` to write; renamed to `out` when the block ends well,
    removed when it raises (an OSError becomes one line naming `out`)."""
    out = Path(out)
    try:
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
    except OSError as exc:
        raise SpecvizError(f"cannot write {out}: {exc.strerror or exc}") from None
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
        temp.chmod(0o644)  # a file to share: mkstemp's 0600 would keep it private
        os.replace(temp, out)
    except OSError as exc:
        raise SpecvizError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)
