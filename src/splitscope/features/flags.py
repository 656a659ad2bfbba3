"""Command-line flags of what a scan reads and how it decodes, generated from the option
fields of :class:`~splitscope.options.InputOptions` and
:class:`~splitscope.features.options.FeatureParams` (every verb that scans a release takes
them)."""

from __future__ import annotations

from splitscope.cli_options import group_flags
from splitscope.features.options import FeatureParams
from splitscope.options import InputOptions

__all__ = ["MODE_OPTION", "SAFETY_OPTIONS"]

#: How each file is decoded for its features (METHODS §2.2; the mode is part of every pixel
#: predicate and of the feature cache's key).
MODE_OPTION = group_flags(FeatureParams, ("mode",))[0]

#: What a scan may read: paths outside the release root, URLs, linked folders, large files.
SAFETY_OPTIONS = [*group_flags(InputOptions, ("allow_outside_root", "allow_urls",
                                              "follow_links")),
                  *group_flags(FeatureParams, ("max_file_bytes",))]
