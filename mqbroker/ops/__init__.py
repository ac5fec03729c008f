"""Operations: the HTTP listener (health, readiness, metrics), metrics collection, CPU affinity."""
