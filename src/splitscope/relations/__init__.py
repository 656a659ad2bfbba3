"""relations layer."""
