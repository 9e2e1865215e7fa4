"""The claim layer: the ledgers (load, bind, rules, decide), the manifests and root
digest, offline ``verify`` and the claims page. It reads the studies' recompute
registries and shipped evidence, never a runtime."""
