"""Security: authentication, SCRAM, ACLs, principal mapping and quotas (pure); TLS, throttling and the wired service (adapters)."""
