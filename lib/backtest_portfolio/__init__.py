"""Decision-focused sparse tangency portfolios (method sheet backtest-portfolio.md).

Submodules: data (price tables, the NaN rule, S&P-20), estimators (trailing windows, Ledoit-Wolf,
closed form, exact enumeration), layer (the differentiable max-Sharpe layer), topk (smooth top-k),
model (predictor, DFL/PFL training: RECONSTRUCTED pipeline), backtest (walk-forward, costs),
metrics (Sharpe, stationary bootstrap), report, synthetic (planted market), demo.
Import the submodules directly; this package imports nothing heavy.
"""
