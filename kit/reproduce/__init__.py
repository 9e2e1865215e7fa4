"""``python -m kit reproduce-all``: every study into ``runs/``, shipped into a fresh folder,
and the claims recomputed from it beside the shipped ones (``kit.claims.fresh``)."""
