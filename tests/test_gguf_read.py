"""gguf's reader over a plain array reads what gguf's own reads (engines/models/gguf_read.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize
from tiny_gguf import write_tiny_gguf

from specviz.engines.models import gguf_read


def write_every_kind(path):
    """A GGUF with a field of every value type, arrays of strings and numbers, and tensors
    quantised and not."""
    w = GGUFWriter(str(path), "llama")
    w.add_string("t.string", "héllo ✓ <|im_start|>")
    w.add_bool("t.bool", True)
    w.add_int8("t.int8", -7)
    w.add_uint16("t.uint16", 65535)
    w.add_int32("t.int32", -123456)
    w.add_uint64("t.uint64", 2**40 + 3)
    w.add_float32("t.float32", 0.25)
    w.add_float64("t.float64", -1e-300)
    w.add_array("t.strings", ["", "a", "βγ", "x" * 300])
    w.add_array("t.ints", list(range(-5, 500)))
    w.add_array("t.floats", [0.5, -2.0, 3.25])
    rng = np.random.default_rng(0)
    w.add_tensor("q", quantize(rng.standard_normal((8, 64)).astype(np.float32),
                               GGMLQuantizationType.Q4_0), raw_dtype=GGMLQuantizationType.Q4_0)
    w.add_tensor("f", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("h", rng.standard_normal(7).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def same_reading(a, b) -> None:
    assert list(a.fields) == list(b.fields)
    for name, fa in a.fields.items():
        fb = b.fields[name]
        assert (fa.offset, fa.data, fa.types) == (fb.offset, fb.data, fb.types), name
        assert len(fa.parts) == len(fb.parts), name
        for pa, pb in zip(fa.parts, fb.parts):
            assert pa.dtype == pb.dtype and np.array_equal(pa, pb), name
        if fa.types:
            assert fa.contents() == fb.contents(), name
    assert (a.data_offset, a.alignment) == (b.data_offset, b.alignment)
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for ta, tb in zip(a.tensors, b.tensors):
        assert (ta.tensor_type, list(ta.shape), ta.n_elements, ta.data_offset) == (
            tb.tensor_type, list(tb.shape), tb.n_elements, tb.data_offset)
        assert ta.data.dtype == tb.data.dtype and np.array_equal(ta.data, tb.data)


@pytest.mark.parametrize("write", [write_every_kind, write_tiny_gguf])
def test_the_plain_reader_reads_every_field_and_tensor_as_ggufs_own(tmp_path, write):
    path = write(tmp_path / "m.gguf")
    plain = gguf_read.reader_class()
    assert plain is not GGUFReader and issubclass(plain, GGUFReader)
    read = plain(path)
    same_reading(GGUFReader(path), read)
    assert type(read.tensors[0].data) is np.ndarray  # not a memmap: sliced in C


def test_a_reader_that_slices_otherwise_is_kept_as_it_is():
    class Other(GGUFReader):
        def _get(self, offset, dtype, count=1):  # another release's signature
            return super()._get(offset, dtype, count)

    import gguf
    kept = gguf.GGUFReader
    try:
        gguf.GGUFReader = Other
        assert gguf_read.reader_class() is Other
    finally:
        gguf.GGUFReader = kept


def test_install_replaces_ggufs_reader_once(monkeypatch):
    import gguf

    monkeypatch.setattr(gguf, "GGUFReader", GGUFReader)
    gguf_read.install()
    installed = gguf.GGUFReader
    gguf_read.install()
    assert gguf.GGUFReader is installed and installed._plain_base is GGUFReader


def test_inside_shared_a_file_is_parsed_once_and_let_go_after(tmp_path):
    path = write_every_kind(tmp_path / "m.gguf")
    plain = gguf_read.reader_class()
    with gguf_read.shared():
        first = plain(path)
        assert plain(str(path)) is first  # the same file, however named
        with gguf_read.shared():  # nested, as a load inside a load
            assert plain(path) is first
        assert plain(path) is first
        assert plain(path, "c") is not first  # opened otherwise than for reading: its own
        other = write_every_kind(tmp_path / "other.gguf")
        assert plain(other) is not first
        write_every_kind(path)  # rewritten: another file
        assert plain(path) is not first
    assert not gguf_read._read  # let go
    assert plain(path) is not plain(path)  # outside: a parse each
    same_reading(GGUFReader(path), plain(path))


def test_a_string_longer_than_the_file_is_one_line(tmp_path):
    """A hostile length (2^62 bytes) for the first key: gguf's own reader raises IndexError;
    ours, as for every other damage, ValueError, and the metadata reader says it in a line."""
    import struct

    from specviz.engines.errors import ModelError
    from specviz.engines.models.gguf_meta import read_metadata

    data = write_every_kind(tmp_path / "m.gguf").read_bytes()
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data[:24] + struct.pack("<Q", 2**62) + data[32:2000])
    with pytest.raises(ValueError, match="past the end of the file"):
        gguf_read.reader_class()(path)
    with pytest.raises(ModelError, match="is not a readable GGUF file") as said:
        read_metadata(path)
    assert "\n" not in str(said.value)
