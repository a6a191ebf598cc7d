"""Image encoders shared by the tools (detect-synthetic's frozen RA-Det encoder, mvi-bench's
zero-shot option scorer).

- :mod:`.backbone`: :func:`~icmlkit.lib.vision.backbone.load_backbone` (EfficientNet-Lite0 with the
  shipped ImageNet weights, or a ``torchvision:<arch>`` / ``timm:<arch>`` network with local weights)
  as a frozen :class:`~icmlkit.lib.vision.backbone.Encoder`, and the ImageNet class names.

Importing this package does not import torch.
"""

LITE0 = "efficientnet-lite0"  # the default encoder's name
