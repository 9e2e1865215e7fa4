"""The real-defect corpus (``kit/protocols/corpus.yaml``): named public onnxruntime CPU defects,
each rebuilt from a minimal model the kit writes, run under every hash-locked release and
decided by the protocol's frozen reproduction rule.

    case.py       what a case is (its issue, releases, level, ground truth, model builder)
    cases/        one small module per case; ``cases.CASES`` lists them in corpus order
    rule.py       the reproduction rule and the hypotheses' arithmetic (numpy only)
    pipeline.py   python -m kit corpus: build, run every release, decide, write evidence
    recompute.py  the corpus ledger's recompute functions (offline, no runtime import)
    report.py     the per-case table and the release x case deviation map
"""
