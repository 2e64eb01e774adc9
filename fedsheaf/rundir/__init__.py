"""The run directory's life: its files (``files``), the lock of the job writing it,
checkpoints, resume checks, the checks before training (``preflight``), progress lines
and the helpers every job driver uses around its loop (``lifecycle``)."""
