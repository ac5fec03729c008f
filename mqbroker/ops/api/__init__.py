"""The admin HTTP API: JSON routes over the broker's operations, described by an OpenAPI document."""
