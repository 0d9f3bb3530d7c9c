"""The cost model: parameter counts, FLOPs, memory, communication and time, over arrays."""
