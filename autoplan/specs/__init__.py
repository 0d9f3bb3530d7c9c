"""Plain-data inputs of the cost model: the model, the hardware, the training setup."""
