"""What the process pool's fork server imports once, before it forks any worker.

Every worker forked from it starts with the extraction code already loaded (Pillow, numpy, the
header and hash modules) and BLAS limited to one thread, instead of importing them itself.
Imported only in the fork server (see :func:`splitscope.features.executor.start_fork_server`),
never in the scanning process, whose BLAS threads it would pin.
"""

from __future__ import annotations

from splitscope.features.executor import pin_blas_threads

pin_blas_threads()

import splitscope.features.batch
import splitscope.features.extract  # noqa: F401
