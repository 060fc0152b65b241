"""The diff's settings by default: here, apart, so that `tracekit diff` reads its options' defaults without
importing the diff (it starts reading the traces first: tracekit/cli/compare.py)."""

DEFAULT_ALPHA = 0.05  # two-sided level of the rank test; the shift's confidence interval is at 1 - alpha
DEFAULT_FLOOR_PERCENT = 1.0  # per-step shifts smaller than this share of the value are never called, however steady
# With one capture a side, host (CPU) times are called only beyond this share of the value: between captures of one
# unchanged job from separate processes they moved by up to 42.5% while GPU kernel times moved by at most 1.7%
# (tests/data/gpu's noise captures; docs/diff.md), and steps of one capture cannot show it.
DEFAULT_HOST_FLOOR_PERCENT = 50.0
DEFAULT_WARMUP_STEPS = 0  # leading steady steps of each capture also left out (the report's rule already applies)
