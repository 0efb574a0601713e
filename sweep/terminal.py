"""Whether output goes to a person at a terminal: the live views redraw in place there, print lines elsewhere."""
from __future__ import annotations

import os
from typing import TextIO


def live_wanted(out: TextIO) -> bool:
    """A live view on a terminal; plain lines elsewhere (pipes, CI logs). SWEEP_PROGRESS=plain|live forces either."""
    mode = os.environ.get("SWEEP_PROGRESS", "auto")
    if mode in ("plain", "live"):
        return mode == "live"
    try:
        return out.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False
