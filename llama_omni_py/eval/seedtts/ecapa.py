"""The ECAPA-TDNN speaker head of the official Seed-TTS SIM model (UniSpeech's
``ECAPA_TDNN_SMALL``: 512 channels, 256-d embedding), in torch.

Attribute names are the checkpoint's (``layer2.Res2Conv1dReluBn.convs.0.weight`` ...), so the
head loads ``wavlm_large_finetune.pth`` by name. Input: the learned softmax mix of the WavLM
hidden states, [B, feat_dim, T']; output: [B, emb_dim], not normalised (SIM is a cosine).
"""

from __future__ import annotations

from .. import deps as _deps

torch = _deps.torch()
nn = torch.nn
F = torch.nn.functional


class ConvReluBn(nn.Module):
    """Conv1d, ReLU, BatchNorm1d (in that order)."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, padding: int = 0, dilation: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, 1, padding, dilation, bias=True)
        self.bn = nn.BatchNorm1d(cout)

    def forward(self, x):
        return self.bn(F.relu(self.conv(x)))


class Res2Conv(nn.Module):
    """Res2Net conv: ``scale`` channel groups, each group after the first adds the previous
    group's output before its conv/ReLU/BN; the last group passes through unchanged."""

    def __init__(self, channels: int, kernel: int, padding: int, dilation: int, scale: int):
        super().__init__()
        self.width = channels // scale
        self.nums = scale - 1 if scale > 1 else 1
        self.scale = scale
        self.convs = nn.ModuleList(
            nn.Conv1d(self.width, self.width, kernel, 1, padding, dilation, bias=True) for _ in range(self.nums)
        )
        self.bns = nn.ModuleList(nn.BatchNorm1d(self.width) for _ in range(self.nums))

    def forward(self, x):
        parts = torch.split(x, self.width, 1)
        out, sp = [], None
        for i in range(self.nums):
            sp = parts[i] if i == 0 else sp + parts[i]
            sp = self.bns[i](F.relu(self.convs[i](sp)))
            out.append(sp)
        if self.scale != 1:
            out.append(parts[self.nums])
        return torch.cat(out, dim=1)


class SqueezeExcite(nn.Module):
    """Channel gates from the time mean: Linear, ReLU, Linear, sigmoid."""

    def __init__(self, channels: int, bottleneck: int):
        super().__init__()
        self.linear1 = nn.Linear(channels, bottleneck)
        self.linear2 = nn.Linear(bottleneck, channels)

    def forward(self, x):
        s = torch.sigmoid(self.linear2(F.relu(self.linear1(x.mean(dim=2)))))
        return x * s.unsqueeze(2)


class SERes2Block(nn.Module):
    """1x1 conv, Res2 conv, 1x1 conv, squeeze-excite, plus the input (equal channel counts)."""

    def __init__(self, channels: int, kernel: int, padding: int, dilation: int, scale: int = 8, se_dim: int = 128):
        super().__init__()
        # Checkpoint names, hence the capitals.
        self.Conv1dReluBn1 = ConvReluBn(channels, channels)
        self.Res2Conv1dReluBn = Res2Conv(channels, kernel, padding, dilation, scale)
        self.Conv1dReluBn2 = ConvReluBn(channels, channels)
        self.SE_Connect = SqueezeExcite(channels, se_dim)

    def forward(self, x):
        y = self.SE_Connect(self.Conv1dReluBn2(self.Res2Conv1dReluBn(self.Conv1dReluBn1(x))))
        return y + x


class AttentiveStatsPool(nn.Module):
    """Attention-weighted mean and standard deviation over time -> [B, 2C]."""

    def __init__(self, channels: int, attention: int = 128):
        super().__init__()
        self.linear1 = nn.Conv1d(channels, attention, kernel_size=1)
        self.linear2 = nn.Conv1d(attention, channels, kernel_size=1)

    def forward(self, x):
        alpha = torch.softmax(self.linear2(torch.tanh(self.linear1(x))), dim=2)
        mean = torch.sum(alpha * x, dim=2)
        var = torch.sum(alpha * x**2, dim=2) - mean**2
        return torch.cat([mean, torch.sqrt(var.clamp(min=1e-9))], dim=1)


class EcapaHead(nn.Module):
    """Layer mix, instance norm and ECAPA-TDNN from stacked hidden states [L, B, T', feat_dim]."""

    def __init__(self, feat_dim: int, num_features: int, channels: int = 512, emb_dim: int = 256):
        super().__init__()
        self.feature_weight = nn.Parameter(torch.zeros(num_features))
        self.instance_norm = nn.InstanceNorm1d(feat_dim)
        self.layer1 = ConvReluBn(feat_dim, channels, kernel=5, padding=2)
        self.layer2 = SERes2Block(channels, 3, padding=2, dilation=2)
        self.layer3 = SERes2Block(channels, 3, padding=3, dilation=3)
        self.layer4 = SERes2Block(channels, 3, padding=4, dilation=4)
        cat = 1536  # the block outputs 2-4 concatenated (3 x 512 in the official model)
        self.conv = nn.Conv1d(channels * 3, cat, kernel_size=1)
        self.pooling = AttentiveStatsPool(cat, attention=128)
        self.bn = nn.BatchNorm1d(cat * 2)
        self.linear = nn.Linear(cat * 2, emb_dim)

    def mix(self, hidden):
        """Softmax-weighted sum of the hidden states, [B, feat_dim, T'] after instance norm."""
        w = F.softmax(self.feature_weight, dim=-1)[:, None, None, None]
        x = (w * hidden).sum(dim=0).transpose(1, 2) + 1e-6
        return self.instance_norm(x)

    def forward(self, hidden):
        out1 = self.layer1(self.mix(hidden))
        out2 = self.layer2(out1)
        out3 = self.layer3(out2)
        out4 = self.layer4(out3)
        out = F.relu(self.conv(torch.cat([out2, out3, out4], dim=1)))
        return self.linear(self.bn(self.pooling(out)))
