"""Cluster metadata: the replicated image and controller decisions (pure), and the control plane adapter."""
