"""Demo and test data generators."""
