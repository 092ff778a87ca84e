"""kjit's log records: logging.getLogger("kjit").

Compiles (INFO), disk loads, cache stores (DEBUG), evictions (INFO), loads from and stores to the
remote tier (INFO), strict-mode misses, damaged entries, refused remote entries, a remote tier that
does not answer, degradations and warnings (WARNING) are records whose data are attributes: ``event``
("compile", "disk_load", "cache_store", "cache_evict", "remote_load", "remote_store", "strict_miss",
"cache_damaged", "remote_refused", "remote_down", "degraded", "warning", "info"), ``key``,
``template``, ``kernel`` (the name expression), ``target`` (``sm_90``), ``origin`` ("compiled", "disk",
"remote") and ``ms`` (None where they do not apply); ``warned`` is True for those
also raised as ``kjit.KjitWarning`` (warnings.warn, as before).

Like every library, kjit adds only a NullHandler: records go where the application's logging
configuration sends them. ``KJIT_VERBOSE=1`` (INFO) or ``2`` (DEBUG) sets the logger's level and adds a
stderr handler printing "kjit: <message>", unless the application configured the "kjit" logger itself
(a level or a handler of its own), which then wins.
"""

import atexit
import logging
import sys

from . import _core

logger = logging.getLogger("kjit")
logger.addHandler(logging.NullHandler())


def _handle_event(level, message, data):
    # Called by the C++ sink, with the GIL, for every event: skip the record when nobody listens.
    if logger.isEnabledFor(level):
        logger.log(level, "%s", message, extra=data)


class _NotWarned(logging.Filter):
    """The KJIT_VERBOSE handler leaves out the warnings that warnings.warn already showed."""

    def filter(self, record):
        return not getattr(record, "warned", False)


class _VerboseHandler(logging.StreamHandler):
    """The stderr handler KJIT_VERBOSE adds: "kjit: <message>", as the C++ core prints without Python."""

    def __init__(self):
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("kjit: %(message)s"))
        self.addFilter(_NotWarned())


def _user_configured():
    return logger.level != logging.NOTSET or any(
        not isinstance(h, (logging.NullHandler, _VerboseHandler)) for h in logger.handlers
    )


def configure_verbose(verbose):
    """What KJIT_VERBOSE does (0: nothing; 1: INFO; 2: DEBUG), unless the "kjit" logger is the user's."""
    if verbose <= 0 or _user_configured():
        return
    logger.setLevel(logging.DEBUG if verbose >= 2 else logging.INFO)
    if not any(isinstance(h, _VerboseHandler) for h in logger.handlers):
        logger.addHandler(_VerboseHandler())


_core._set_log_handler(_handle_event)
# Python's atexit hooks run before the interpreter finalizes: from then on, events of threads still
# compiling are KJIT_VERBOSE lines on stderr instead of calls into an interpreter that is going away.
atexit.register(_core._close_log)
# Kernels compiling ahead on background threads (an op's backward, at its forward) finish first, the queued
# ones are dropped (atexit runs the last registered first), while their log records still reach logging.
atexit.register(_core._drain_background_jobs, drop_queued=True)
configure_verbose(_core._verbose())
