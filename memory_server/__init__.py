"""memory-server: durable conversation logs and searchable saved memories for AI agents."""

import os

# One BLAS thread per call: requests already run in parallel worker threads, and on a small machine a
# multi-threaded OpenBLAS spins against them (a 2000 x 384 matrix-vector product measured 9 ms with two
# threads under load, 0.5 ms with one). Set before numpy is first imported; an operator's value wins.
for _variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
# onnxruntime's telemetry would, at import, try to persist a device id under $HOME and, where HOME is not
# writable (a container's non-root user), print an ANSI-coloured warning into the JSON logs.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
