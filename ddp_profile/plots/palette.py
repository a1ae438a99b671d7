"""One colour per concept, the same in every figure: the Okabe–Ito palette (Okabe & Ito 2008), which stays
distinguishable with the common colour-vision deficiencies. Memset bars share the copy colour and are
hatched (:data:`MEMSET_PATTERN`), so the two kinds differ by more than hue.

=================  ===========  ==========================================================
concept            colour       where
=================  ===========  ==========================================================
compute            blue         compute kernels, "compute only" time
NCCL (hidden)      orange       NCCL kernels, communication overlapped with compute
NCCL exposed       vermillion   exposed communication (no compute running)
wait               purple       NCCL wait (ranks arriving at different times), grad_wait
memcpy/memset      green        copies and memsets
idle               grey         no kernel running
comm tail          black        end of backward to end of the last collective
CPU launch / sync  grey / verm.  the main thread's kernel launches; its syncs (host waits for GPU)
=================  ===========  ==========================================================
"""

from __future__ import annotations

from ddp_profile.schema import PHASES

COMPUTE = "#0072B2"  # Okabe–Ito blue
NCCL = "#E69F00"  # orange: NCCL kernels / communication hidden under compute
NCCL_EXPOSED = "#D55E00"  # vermillion
WAIT = "#CC79A7"  # reddish purple
COPY = "#009E73"  # bluish green: memcpy and memset
IDLE = "#999999"  # grey
TAIL = "#000000"  # black
SKY = "#56B4E9"  # sky blue: secondary series (models, fits)
YELLOW = "#F0E442"

MEMSET_PATTERN = {"shape": "/", "fgcolor": "#FFFFFF", "size": 4, "solidity": 0.4}

KIND_COLORS = {"compute": COMPUTE, "nccl": NCCL, "memcpy": COPY, "memset": COPY}
# NVTX phases are context, not kernels: light tints, and grad_wait (a wait) in the wait colour.
PHASE_COLORS = dict(zip(PHASES, ("#C6DBEF", "#9ECAE1", WAIT, "#DDDDDD"), strict=True))  # schema.PHASES order
# The timeline's CPU rows: launches in grey, synchronisation calls (the host waiting) highlighted.
HOST_COLORS = {"launch": IDLE, "sync": NCCL_EXPOSED}
SEGMENT_COLORS = {
    "compute only": COMPUTE,
    "overlapped comm": NCCL,
    "exposed comm": NCCL_EXPOSED,
    "idle": IDLE,
}
# Series colours for figures whose traces are runs or strategies rather than concepts.
SERIES = [COMPUTE, NCCL, COPY, WAIT, NCCL_EXPOSED, SKY, YELLOW, TAIL]
