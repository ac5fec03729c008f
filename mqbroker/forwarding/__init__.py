"""Front ends in a cluster: route decisions, the forwarded wire form, the routing broker, peer connections."""
