"""autoplan: plan parallel layouts for training large language models on GPU clusters."""

__version__ = "0.1.0"
