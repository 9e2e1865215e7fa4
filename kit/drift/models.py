"""The three classifiers of the drift study, as the chenyaofo CIFAR-100 checkpoints
define them (torchvision v0.9.1 models adapted to 32x32 inputs), and their strict loader.

Module and parameter names follow the checkpoints key for key, so a state_dict loads with
``strict=True`` (``tests/data/chenyaofo_cifar100_state_dict_keys.txt`` is the reference):

- ``resnet20``: conv1 3->16 + bn1; layer1/2/3 of 3 BasicBlocks at 16/32/64 channels,
  stride 2 at layer2.0 and layer3.0 with a 1x1 conv+BN shortcut; avg pool; fc. 21 convs.
- ``mobilenetv2_x0_5``: stem 3x3 conv 3->16 stride 1, 17 inverted residual blocks (widths
  rounded to multiples of 8), 1x1 conv 160->1280, dropout 0.2, classifier. ReLU6. 52 convs.
- ``vgg11_bn``: [64,M,128,M,256,256,M,512,512,M,512,512,M] 3x3 conv+BN+ReLU, classifier
  512->512->512->classes with ReLU and dropout. 8 convs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from kit.errors import KitError

CIFAR100_MEAN = (0.507, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2761)


# ---------------------------------------------------------------- ResNet-20
class BasicBlock(nn.Module):
    """Two 3x3 conv+BN with a shortcut (1x1 conv+BN when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)  # type: ignore[no-any-return]


class CifarResNet(nn.Module):
    """ResNet for 32x32 inputs: 3 stages of ``blocks`` BasicBlocks at 16/32/64."""

    def __init__(self, blocks: int, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        stages = []
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            layers = [BasicBlock(cin, cout, stride)]
            layers += [BasicBlock(cout, cout, 1) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*layers))
            cin = cout
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))  # type: ignore[no-any-return]


# ---------------------------------------------------------------- MobileNetV2
def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: nearest multiple of ``divisor``, never 10% down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvBNReLU(nn.Sequential):
    """Conv (no bias) + BN + ReLU6, indices 0/1/2 as in torchvision."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1,
                 groups: int = 1) -> None:
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2,
                                   groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """Expand (1x1, unless t=1), depthwise 3x3, project (1x1 linear) + BN."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = round(cin * expand)
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNReLU(cin, hidden, kernel=1))
        layers += [ConvBNReLU(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, 1, 0, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return x + out if self.use_res_connect else out  # type: ignore[no-any-return]


MOBILENET_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2),
                      (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    """MobileNetV2 for 32x32 inputs (stem stride 1, CIFAR strides)."""

    def __init__(self, width_mult: float, num_classes: int) -> None:
        super().__init__()
        cin = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU(3, cin, stride=1)]
        for expand, channels, repeats, stride in MOBILENET_SETTINGS:
            cout = make_divisible(channels * width_mult)
            for i in range(repeats):
                features.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        features.append(ConvBNReLU(cin, last, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))  # type: ignore[no-any-return]


# ---------------------------------------------------------------- VGG-11-BN
VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    """VGG with batch norm for 32x32 inputs: five pools leave 512x1x1."""

    def __init__(self, cfg: tuple[int | str, ...], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for item in cfg:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                assert isinstance(item, int)
                layers += [nn.Conv2d(cin, item, 3, padding=1), nn.BatchNorm2d(item),
                           nn.ReLU(inplace=True)]
                cin = item
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(512, 512), nn.ReLU(True), nn.Dropout(),
            nn.Linear(512, 512), nn.ReLU(True), nn.Dropout(), nn.Linear(512, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))  # type: ignore[no-any-return]


ARCHITECTURES: dict[str, Callable[[int], nn.Module]] = {
    "resnet20": lambda classes: CifarResNet(3, classes),
    "mobilenetv2_x0_5": lambda classes: MobileNetV2(0.5, classes),
    "vgg11_bn": lambda classes: VGG(VGG11, classes),
}


def build_model(name: str, num_classes: int) -> nn.Module:
    """A freshly initialised model of architecture ``name``."""
    if name not in ARCHITECTURES:
        raise KitError(f"unknown architecture {name!r}; known: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[name](num_classes)


def conv_names(model: nn.Module) -> list[str]:
    """Module names of every convolution, in execution (definition) order."""
    return [name for name, module in model.named_modules() if isinstance(module, nn.Conv2d)]


def load_checkpoint(name: str, path: Path, num_classes: int = 100) -> nn.Module:
    """Build ``name`` and load the state_dict at ``path`` strictly (weights only)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors alike
        raise KitError(f"{path}: not a loadable weights-only checkpoint ({exc})") from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor)
                                              for v in state.values()):
        raise KitError(f"{path}: expected a plain state_dict of tensors")
    model = build_model(name, num_classes)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise KitError(f"{path}: state_dict does not match {name}: missing {missing[:5]}"
                       f"{' ...' if len(missing) > 5 else ''}, unexpected {extra[:5]}"
                       f"{' ...' if len(extra) > 5 else ''}")
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}"
             for k, v in expected.items() if state[k].shape != v.shape]
    if wrong:
        raise KitError(f"{path}: state_dict shapes do not match {name}: {wrong[:5]}")
    model.load_state_dict(state, strict=True)
    return model.eval()
