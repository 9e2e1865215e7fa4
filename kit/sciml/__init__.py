"""The SciML study's framework: MR cards (``cards``), the admissibility gate (``gate``),
typed verdicts (``verdicts``), the verdict ledger (``ledger``) and the statistics its
claims use (``stats``)."""
