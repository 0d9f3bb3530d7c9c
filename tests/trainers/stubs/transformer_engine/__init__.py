"""An import stub for Transformer Engine, put on PYTHONPATH only for Megatron-Bridge's config loader
check (tests/trainers/test_with_real_trainers.py, ``BRIDGE_LOADER``).

Transformer Engine is a CUDA build that does not install on a CPU machine, and every
``megatron.bridge`` import reaches ``import transformer_engine.pytorch`` (peft/lora_layers.py) and
Megatron-Core's TE extensions, though building a ``ConfigContainer`` from a recipe runs none of its
kernels. Here every ``transformer_engine.*`` module imports and every attribute is a placeholder
class, so module-level imports and class definitions succeed; anything that really calls TE would
get a placeholder object instead of a tensor, and the check compares only the loaded config's
fields. ``__version__`` is the lowest Transformer Engine Megatron-Bridge 0.3.1 requires (its
``transformer-engine>=2.10.0a0``), for the ``is_te_min_version`` checks made at import.
"""

import importlib.machinery
import sys
import types

__version__ = "2.10.0"


class _Placeholder(type):
    """A class whose every attribute is another placeholder class (``te.pytorch.Linear.forward``)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(name)


def _placeholder(name: str) -> type:
    return _Placeholder(name, (object,), {"__init__": lambda self, *args, **kwargs: None})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return sys.modules.get(f"{self.__name__}.{name}") or _placeholder(name)


class _Finder:
    """Imports every ``transformer_engine.<sub>`` as an empty package of placeholders."""

    def find_spec(self, name, path, target=None):
        if name.startswith("transformer_engine."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
sys.modules[__name__].__class__ = _Module
