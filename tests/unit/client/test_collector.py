"""``collector_paused``: no cyclic collection inside the block, the collector as it was afterwards."""

from __future__ import annotations

import gc

from mqbroker.client.collector import collector_paused


def test_the_collector_is_paused_only_inside_the_block_and_restored_after_an_error() -> None:
    try:
        with collector_paused():
            assert not gc.isenabled()
            raise ValueError("the run failed")
    except ValueError:
        pass
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
