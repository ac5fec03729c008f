"""The storage library's own small decoders (producer snapshots, offset checkpoints) fed garbage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.storage import checkpoint
from mqbroker.storage.errors import CorruptFileError
from mqbroker.storage.producers import ProducerStates


@given(st.binary(max_size=300))
def test_garbage_producer_snapshots_raise_only_the_corruption_error(data):
    try:
        ProducerStates.from_bytes(data)
    except CorruptFileError:
        pass


@given(st.binary(max_size=200))
def test_garbage_checkpoints_raise_only_the_corruption_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("checkpoint") / "recovery-point-offset-checkpoint"
    path.write_bytes(data)
    try:
        checkpoint.read_offsets(str(path))
    except CorruptFileError:
        pass


@given(st.binary(max_size=60))
def test_garbage_single_offset_checkpoints_raise_only_the_corruption_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("checkpoint") / "cleaner-offset-checkpoint"
    path.write_bytes(data)
    try:
        checkpoint.read_offset(str(path))
    except CorruptFileError:
        pass


def test_single_offset_checkpoints_round_trip(tmp_path):
    checkpoint.write_offset(str(tmp_path / "c"), 1234)
    assert checkpoint.read_offset(str(tmp_path / "c")) == 1234
    assert checkpoint.read_offset(str(tmp_path / "missing")) is None


def test_checkpoints_round_trip(tmp_path):
    offsets = {("orders", 0): 17, ("audit-log", 12): 0}
    checkpoint.write_offsets(str(tmp_path / "c"), offsets)
    assert checkpoint.read_offsets(str(tmp_path / "c")) == offsets
    assert checkpoint.read_offsets(str(tmp_path / "missing")) == {}


def test_an_unreadable_checkpoint_names_the_file(tmp_path):
    (tmp_path / "c").write_text("0\n2\norders 0 1\n")
    with pytest.raises(CorruptFileError, match="c"):
        checkpoint.read_offsets(str(tmp_path / "c"))
