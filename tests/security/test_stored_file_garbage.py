"""Hypothesis garbage for the files a broker reads back at start-up: the Raft snapshot and on-disk Raft files,
the offset and time indexes, the leader-epoch checkpoint. Only the documented typed errors may escape
(a corrupt file is the disk's fault and stops start-up with a message), or the file is rebuilt."""

from __future__ import annotations

import os
import pathlib
import struct
import tempfile

import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.raft.codec import decode_snapshot, encode_snapshot
from mqbroker.raft.errors import RaftCodecError
from mqbroker.raft.messages import Configuration, Snapshot, SnapshotMetadata
from mqbroker.raft.storage import ENTRIES_FILE, HARD_STATE_FILE, SNAPSHOT_FILE, FileRaftStorage
from mqbroker.storage.epochs import EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from mqbroker.storage.errors import CorruptFileError
from mqbroker.storage.index import offset_index, time_index

GARBAGE = st.binary(max_size=512)
SNAPSHOT = Snapshot(metadata=SnapshotMetadata(index=5, term=2, configuration=Configuration(voters=frozenset({1, 2, 3}))),
                    data=b"image")


def _with_crc(body: bytes) -> bytes:
    return struct.pack(">I", crc32c.crc32c(body)) + body


@given(GARBAGE)
def test_snapshot_decoder_raises_only_its_codec_error(data: bytes) -> None:
    try:
        decode_snapshot(data)
    except RaftCodecError:
        pass


@given(st.binary(max_size=64), st.integers(min_value=0, max_value=200))
def test_snapshot_decoder_survives_a_valid_snapshot_with_bytes_changed(noise: bytes, at: int) -> None:
    encoded = bytearray(encode_snapshot(SNAPSHOT))
    encoded[at % len(encoded): at % len(encoded) + len(noise)] = noise
    try:
        decode_snapshot(bytes(encoded))
    except RaftCodecError:
        pass


def _open_with(files: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        for name, data in files.items():
            pathlib.Path(directory, name).write_bytes(data)
        try:
            FileRaftStorage.open(directory).close()
        except CorruptFileError:
            pass


@settings(max_examples=100)
@given(GARBAGE, st.booleans())
def test_a_garbage_raft_snapshot_file_is_a_corrupt_file_error(data: bytes, valid_crc: bool) -> None:
    _open_with({SNAPSHOT_FILE: _with_crc(data) if valid_crc else data})


@settings(max_examples=100)
@given(GARBAGE, st.booleans())
def test_a_garbage_raft_hard_state_file_is_a_corrupt_file_error(data: bytes, valid_crc: bool) -> None:
    _open_with({SNAPSHOT_FILE: _with_crc(encode_snapshot(SNAPSHOT)), HARD_STATE_FILE: _with_crc(data) if valid_crc else data})


@settings(max_examples=100)
@given(GARBAGE)
def test_a_garbage_raft_entries_file_is_cut_back_to_its_valid_prefix(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        pathlib.Path(directory, SNAPSHOT_FILE).write_bytes(_with_crc(encode_snapshot(SNAPSHOT)))
        pathlib.Path(directory, ENTRIES_FILE).write_bytes(data)
        storage = FileRaftStorage.open(directory)
        assert storage.first_index() == SNAPSHOT.metadata.index + 1
        storage.close()
        assert os.path.getsize(os.path.join(directory, ENTRIES_FILE)) <= len(data)


@settings(max_examples=100)
@given(GARBAGE, st.sampled_from([offset_index, time_index]))
def test_a_garbage_index_file_is_dropped_for_a_rebuild(data: bytes, index_for) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "00000000000000000000.index")
        pathlib.Path(path).write_bytes(data)
        index = index_for(path)
        kept = index.load(lambda loaded: True)
        assert index.loaded
        if not kept:
            assert len(index) == 0 and os.path.getsize(path) == 0


@settings(max_examples=100)
@given(st.one_of(GARBAGE, st.text(alphabet="0123456789 -\n", max_size=64).map(str.encode)))
def test_a_garbage_leader_epoch_checkpoint_is_a_corrupt_file_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        pathlib.Path(directory, EPOCH_CHECKPOINT_FILE).write_bytes(data)
        try:
            LeaderEpochCache.load(directory)
        except CorruptFileError:
            pass
