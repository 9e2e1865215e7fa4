"""The drift study: protocol, substrates (digits, CIFAR-100), models and their training,
fault injection, detectors, calibration, localisation, bootstraps, the staged pipeline
(``kit.drift.stages``), its report, replay, benchmarks and the claims' recompute
functions. It runs the models through ``kit.runtime`` and imports nothing of
``kit.sciml``."""
