"""Share groups: queues on the log (KIP-932's semantics), delayed delivery, dead letters and push subscriptions.

Pure cores: ``partition`` (one share partition's record states: leases, acknowledgements, delivery
counts, dead letters, due delayed records), ``members`` (who belongs to a group), ``settings`` (a
group's configuration), ``state_records`` (the ``__share_group_state`` record formats), ``delays``
(deliver-at times from record headers), ``messages`` (the requests and replies of the broker API).
Adapters: ``delay_index`` (the on-disk index of scheduled records), ``service`` (one state
partition's groups inside the broker), ``hosting`` (which state partitions this broker leads) and
``push`` (the broker as an HTTP-pushing consumer).
"""
