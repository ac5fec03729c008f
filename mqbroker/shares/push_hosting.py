"""The push dispatchers of the share groups one ``ShareService`` hosts: started with a group that has
``push.endpoint``, stopped when it changes, is deleted, or the hosting ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from twisted.logger import Logger

from mqbroker.shares.group import HostedGroup

if TYPE_CHECKING:  # the service builds this: no import cycle at run time
    from mqbroker.shares.service import ShareService


class PushDispatcher(Protocol):
    """A push subscription's delivery loop (``push.dispatcher``)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


#: Builds the dispatcher of a group with ``push.endpoint`` (given the service as its host).
PushFactory = Callable[[HostedGroup, "ShareService"], PushDispatcher]


class PushHosting:
    """One push dispatcher per hosted group with a push endpoint."""

    log = Logger()

    def __init__(self, service: ShareService, factory: PushFactory | None) -> None:
        self._service = service
        self._factory = factory
        self._pushers: dict[str, PushDispatcher] = {}

    def start(self, group: HostedGroup) -> None:
        """Start the group's dispatcher if it pushes and has none yet."""
        if group.settings.push is None or self._factory is None or group.group_id in self._pushers:
            return
        try:
            pusher = self._factory(group, self._service)
        except (OSError, ValueError) as error:  # e.g. an unreadable push.ca.file: fix it with `alter`
            self.log.error("push subscription {group} cannot start: {error}", group=group.group_id, error=error)
            return
        self._pushers[group.group_id] = pusher
        pusher.start()

    def stop(self, group_id: str) -> None:
        """Stop the group's dispatcher, if it has one."""
        pusher = self._pushers.pop(group_id, None)
        if pusher is not None:
            pusher.stop()

    def stop_all(self) -> None:
        """The hosting ends: every dispatcher stops."""
        for group_id in list(self._pushers):
            self.stop(group_id)
