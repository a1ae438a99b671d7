"""NVTX names shared by the training harness (which emits them) and the parser (which reads them).

Changing a value here changes both sides at once; traces recorded with older names stay readable through
the regex fallbacks in the analysis (``STEP_PATTERN`` etc.).
"""

DOMAIN = "ddp_profile"

# One range per training step; its payload is the step index. The message is f"{STEP} {index}".
STEP = "step"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
# The wait inside finish_gradient_synchronization().
GRAD_WAIT = "grad_sync_wait"
# One range per collective launch; payload = size in bytes. Message: f"{ALLREDUCE_PREFIX} b{bucket} {nbytes}B".
ALLREDUCE_PREFIX = "allreduce"
# One range per parameter broadcast of the sharded optimizer (ZeRO-1, after the owners' update); payload =
# size in bytes. Message: f"{PARAM_SYNC_PREFIX} b{bucket} r{owner} {nbytes}B" (bucket = owner bucket index).
PARAM_SYNC_PREFIX = "param_sync"
# One range per FSDP unit's forward (FSDP2's all-gather wait, the block's compute and its reshard); payload =
# unit index. Message: f"{FSDP_BLOCK_PREFIX} {index}". Not a collective range: see harness/strategies/fsdp.py.
FSDP_BLOCK_PREFIX = "fsdp block"
# Marker emitted once per process at start-up: f"{RANK_MARKER} {rank}/{world_size}" (payload = rank).
RANK_MARKER = "ddp_profile.rank"

# NVTX categories (shown as groups in the nsys GUI).
CATEGORY_PHASE = 1
CATEGORY_STEP = 2
CATEGORY_BUCKET = 3
CATEGORY_META = 4

# Colours by phase (ARGB names accepted by the nvtx package).
COLORS = {
    STEP: "grey",
    FORWARD: "blue",
    BACKWARD: "green",
    OPTIMIZER: "purple",
    GRAD_WAIT: "red",
    ALLREDUCE_PREFIX: "orange",
    PARAM_SYNC_PREFIX: "yellow",
    FSDP_BLOCK_PREFIX: "cyan",
}

# Default regexes the analysis uses to recognise phases in any trace (overridable on the CLI).
# Steps: "step 3", "step3", "step_3", "Step #3", "iteration 7", "iter 7", "it 3", "train_step_3",
# "train step 3", "ProfilerStep#12" (case-insensitive; a bare "step" too). Described in STEP_PATTERN_HELP.
STEP_PATTERN = (
    r"(?i)^(?:(?:train[_ ]?)?(?:step|iteration|iter|it)(?:[\s_#:=-]*\d+)?|ProfilerStep#\d+"
    r"|iteration\b.*|train_step\b.*)$"
)
STEP_PATTERN_HELP = (
    "names like 'step 3', 'step3', 'step_3', 'iteration 7', 'iter 7', 'it 3', 'train_step_3', "
    "'train step 3', 'ProfilerStep#12' (case-insensitive)"
)
FORWARD_PATTERN = r"^(forward|fwd)\b"
BACKWARD_PATTERN = r"^(backward|bwd)\b"
OPTIMIZER_PATTERN = r"^(optimizer|optim|opt_step)\b"
