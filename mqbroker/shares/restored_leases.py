"""Leases a new host of share groups found stored: they stay with their holders, who may join the new host
within ``share_restored_lease_grace_ms``; the push member's go at once (its requests died with the old host); those
of holders that did not join are released when the grace ends (delivery counts kept)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from mqbroker import limits
from mqbroker.shares.group import HostedGroup
from mqbroker.shares.push.dispatcher import PUSH_MEMBER
from mqbroker.shares.runtime import HostedPartition


class RestoredLeases:
    """The holders of stored leases, by group, until the grace ends."""

    def __init__(self, clock: IReactorTime, groups: Mapping[str, HostedGroup],
                 settle: Callable[[HostedGroup, HostedPartition], object]) -> None:
        """Keep the stored leases of ``groups`` (just restored); ``settle`` after each partition the grace changed."""
        self._groups = groups
        self._settle = settle
        self._holders = self._keep(groups)
        self._grace: IDelayedCall | None = None
        if self._holders:
            self._grace = clock.callLater(limits.share_restored_lease_grace_ms / 1000, self._release_absent)

    @staticmethod
    def _keep(groups: Mapping[str, HostedGroup]) -> dict[str, set[str]]:
        holders: dict[str, set[str]] = {}
        for group in groups.values():
            for hosted in group.partitions.values():
                if group.settings.push is not None:
                    hosted.state.release_owners((PUSH_MEMBER,), "the push subscription moved to another broker")
                holders.setdefault(group.group_id, set()).update(hosted.state.lease_owners())
        return {group_id: owners for group_id, owners in holders.items() if owners}

    def _release_absent(self) -> None:
        """The grace ended: leases of stored holders that did not join this host are released (counts kept)."""
        self._grace = None
        for group_id, owners in self._holders.items():
            group = self._groups.get(group_id)
            if group is None:
                continue
            absent = {owner for owner in owners if group.members.get(owner) is None}
            for hosted in group.partitions.values():
                if hosted.state.release_owners(absent, "its holder did not join the group's new host"):
                    self._settle(group, hosted)
        self._holders = {}

    def cancel(self) -> None:
        """The hosting ends before the grace does."""
        if self._grace is not None and self._grace.active():
            self._grace.cancel()
        self._grace = None
