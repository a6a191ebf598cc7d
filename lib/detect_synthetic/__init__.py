"""RA-Det (detect-synthetic): robustness-asymmetry detection of generated images, with the RIGID,
linear-probe and fine-tuned baselines, the EfficientNet-Lite0 encoder, the TAEF2 autoencoder and the
CNNDetection reader of the real benchmark, three small in-process generators and the offline toy
benchmark (method sheet detect-synthetic.md). :mod:`icmlkit.lib.detect_synthetic.pipeline` has one
function per subcommand (``train``, ``score``, ``evaluate``, ``probe``).

Parts the paper text does not confirm are marked RECONSTRUCTED in each module's docstring.
Submodules load on first use (``--help`` never imports torch).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "DEFAULT_BACKBONE": "icmlkit.lib.detect_synthetic.config",
    "EfficientNetLite": "icmlkit.lib.vision.backbone",
    "Encoder": "icmlkit.lib.vision.backbone",
    "load_backbone": "icmlkit.lib.vision.backbone",
    "ProbeUNet": "icmlkit.lib.detect_synthetic.probe",
    "apply_perturbation": "icmlkit.lib.detect_synthetic.probe",
    "discrepancy_loss": "icmlkit.lib.detect_synthetic.probe",
    "drift": "icmlkit.lib.detect_synthetic.probe",
    "gaussian_probe": "icmlkit.lib.detect_synthetic.probe",
    "lpd_map": "icmlkit.lib.detect_synthetic.probe",
    "multiscale_views": "icmlkit.lib.detect_synthetic.probe",
    "METHODS": "icmlkit.lib.detect_synthetic.config",
    "Detector": "icmlkit.lib.detect_synthetic.model",
    "DetectorConfig": "icmlkit.lib.detect_synthetic.config",
    "ProbeConfig": "icmlkit.lib.detect_synthetic.config",
    "load_model": "icmlkit.lib.detect_synthetic.model",
    "save_model": "icmlkit.lib.detect_synthetic.model",
    "detection_metrics": "icmlkit.lib.detect_synthetic.metrics",
    "asymmetry_test": "icmlkit.lib.detect_synthetic.metrics",
    "make_benchmark": "icmlkit.lib.detect_synthetic.benchmark",
    "evaluate": "icmlkit.lib.detect_synthetic.pipeline",
    "train": "icmlkit.lib.detect_synthetic.pipeline",
    "ImageSet": "icmlkit.lib.detect_synthetic.pipeline",
    "list_images": "icmlkit.lib.detect_synthetic.images",
    "branch_loss": "icmlkit.lib.detect_synthetic.model",
    "fuse": "icmlkit.lib.detect_synthetic.model",
    "TAEF2": "icmlkit.lib.detect_synthetic.taef2",
    "load_taef2": "icmlkit.lib.detect_synthetic.taef2",
    "read_cnndetection": "icmlkit.lib.detect_synthetic.datasets",
    "split_by_source": "icmlkit.lib.detect_synthetic.datasets",
    "aligned_pairs": "icmlkit.lib.detect_synthetic.datasets",
    "load_images": "icmlkit.lib.detect_synthetic.images",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
