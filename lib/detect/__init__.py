"""RA-Det (detect-synthetic): robustness-asymmetry detection of generated images, with the RIGID,
linear-probe and fine-tuned baselines, the EfficientNet-Lite0 encoder, the TAEF2 autoencoder and the
CNNDetection reader of the real benchmark, three small in-process generators and the offline toy
benchmark (method sheet detect-synthetic.md). :mod:`icmlkit.lib.detect.pipeline` has one
function per subcommand (``train``, ``score``, ``evaluate``, ``probe``).

Parts the paper text does not confirm are marked RECONSTRUCTED in each module's docstring.
Submodules load on first use (``--help`` never imports torch).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "DEFAULT_BACKBONE": "icmlkit.lib.detect.config",
    "EfficientNetLite": "icmlkit.lib.detect.backbone",
    "Encoder": "icmlkit.lib.detect.backbone",
    "load_backbone": "icmlkit.lib.detect.backbone",
    "ProbeUNet": "icmlkit.lib.detect.probe",
    "apply_perturbation": "icmlkit.lib.detect.probe",
    "discrepancy_loss": "icmlkit.lib.detect.probe",
    "drift": "icmlkit.lib.detect.probe",
    "gaussian_probe": "icmlkit.lib.detect.probe",
    "lpd_map": "icmlkit.lib.detect.probe",
    "multiscale_views": "icmlkit.lib.detect.probe",
    "METHODS": "icmlkit.lib.detect.config",
    "Detector": "icmlkit.lib.detect.model",
    "DetectorConfig": "icmlkit.lib.detect.config",
    "ProbeConfig": "icmlkit.lib.detect.config",
    "load_model": "icmlkit.lib.detect.model",
    "save_model": "icmlkit.lib.detect.model",
    "detection_metrics": "icmlkit.lib.detect.metrics",
    "asymmetry_test": "icmlkit.lib.detect.metrics",
    "make_benchmark": "icmlkit.lib.detect.benchmark",
    "evaluate": "icmlkit.lib.detect.pipeline",
    "train": "icmlkit.lib.detect.pipeline",
    "ImageSet": "icmlkit.lib.detect.pipeline",
    "list_images": "icmlkit.lib.detect.images",
    "branch_loss": "icmlkit.lib.detect.model",
    "fuse": "icmlkit.lib.detect.model",
    "TAEF2": "icmlkit.lib.detect.taef2",
    "load_taef2": "icmlkit.lib.detect.taef2",
    "read_cnndetection": "icmlkit.lib.detect.datasets",
    "split_by_source": "icmlkit.lib.detect.datasets",
    "aligned_pairs": "icmlkit.lib.detect.datasets",
    "load_images": "icmlkit.lib.detect.images",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
