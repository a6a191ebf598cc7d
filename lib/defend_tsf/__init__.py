"""defend-tsf's library: TimeGuard (Nguyen et al., ICML 2026), channel-wise pool training against
backdoors in time-series forecasting, with the attacks and baselines it is measured against.

- :mod:`.config`: option dataclasses (torch-free); :mod:`.data`: CSV reader, splits, z-scoring,
  windows; :mod:`.models`: DLinear, PatchTST, iTransformer-lite, TimesNet-lite;
- :mod:`.timeguard`: masked losses, the time-aware distance, Stage I criteria, DRLS;
- :mod:`.train`: the training loop of every defence; :mod:`.attack`: BackTime-style injection
  (Random trigger), MAE_P; :mod:`.api`: one function per subcommand; :mod:`.demo`, :mod:`.synth`.
"""
from icmlkit.lib.core.lazy import lazy_exports

__getattr__ = lazy_exports(__name__, {
    "read_series": "icmlkit.lib.defend_tsf.data",
    "attack_series": "icmlkit.lib.defend_tsf.api",
    "train": "icmlkit.lib.defend_tsf.api",
    "evaluate": "icmlkit.lib.defend_tsf.api",
    "forecast": "icmlkit.lib.defend_tsf.api",
    "read_model": "icmlkit.lib.defend_tsf.api",
    "read_record": "icmlkit.lib.defend_tsf.api",
    "train_forecaster": "icmlkit.lib.defend_tsf.train",
    "synthetic_series": "icmlkit.lib.defend_tsf.synth",
})
