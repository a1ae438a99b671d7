"""Reading Nsight Systems SQLite exports: ``load_trace`` returns a :class:`ddp_profile.trace.Trace`.

``sql`` is the only module that knows nsys table and column names; ``names`` parses NCCL kernel names;
``ranks`` works out which process is which rank; ``loader`` assembles the frames; ``summary`` condenses a
trace for ``ddp-profile inspect``.
"""
