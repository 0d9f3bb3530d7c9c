"""The mechanism behind ``Recompute.full_recompute_skips_last_linear``, measured on the installed
torch: a non-reentrant checkpoint of a whole transformer block with early stop (torch's default
from 2.1) never reruns the block's last linear, the MLP down projection; with early stop off, or a
reentrant checkpoint (the kind Megatron-Core and DeepSpeed run), it does. Counted as the addmm
calls of the backward, which holds the recomputed forward's linears (each with a bias: addmm) and
the gradients (mm)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop  # noqa: E402

H, F_HIDDEN = 64, 256  # the down projection is the only linear whose input is 256 wide


class Block(nn.Module):
    """Pre-norm attention and MLP with residuals, as an MPTBlock or a Llama block."""

    def __init__(self, gated: bool):
        super().__init__()
        self.gated = gated
        self.norm1, self.norm2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.qkv, self.out = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.up, self.gate, self.down = nn.Linear(H, F_HIDDEN), nn.Linear(H, F_HIDDEN), nn.Linear(F_HIDDEN, H)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, 4, H // 4).permute(2, 0, 3, 1, 4)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, H))
        y = self.norm2(x)
        z = F.silu(self.gate(y)) * self.up(y) if self.gated else F.gelu(self.up(y))
        return x + self.down(z)


class AddmmInputWidths(TorchDispatchMode):
    """The input width of every addmm run inside the block."""

    def __init__(self):
        super().__init__()
        self.widths: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.startswith("addmm"):
            self.widths.append(int(args[1].shape[-1]))
        return func(*args, **(kwargs or {}))


def recomputed_linear_widths(gated: bool, reentrant: bool, early_stop: bool) -> list[int]:
    torch.manual_seed(0)
    block = Block(gated)
    x = torch.randn(2, 16, H, requires_grad=True)
    with set_checkpoint_early_stop(early_stop):
        y = checkpoint(block, x, use_reentrant=reentrant)
    with AddmmInputWidths() as seen:
        y.sum().backward()
    return sorted(seen.widths)


@pytest.mark.parametrize("gated", [False, True])
def test_early_stop_never_reruns_the_down_projection(gated):
    forward = [H, H, H] + ([H] if gated else [])  # qkv, out, up (and gate); the down one is 256 wide
    assert recomputed_linear_widths(gated, reentrant=False, early_stop=True) == sorted(forward)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(("reentrant", "early_stop"), [(False, False), (True, True)])
def test_without_early_stop_the_whole_block_runs_again(gated, reentrant, early_stop):
    forward = [H, H, H] + ([H] if gated else []) + [F_HIDDEN]
    assert recomputed_linear_widths(gated, reentrant, early_stop) == sorted(forward)
