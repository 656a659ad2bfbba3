"""probes layer."""
