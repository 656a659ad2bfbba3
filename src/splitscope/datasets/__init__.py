"""Demo and test data generators."""

from splitscope.datasets.demo import DEMO_GROUP_REGEX, PLANTED_COUNTS, PREDICATES, make_demo

__all__ = ["DEMO_GROUP_REGEX", "PLANTED_COUNTS", "PREDICATES", "make_demo"]
