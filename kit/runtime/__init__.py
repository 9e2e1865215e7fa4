"""The runtime layer: the worker (the only code that touches onnxruntime), the locked
runtimes and their venvs, the docker and venv backends, the ``.npz`` exchange, the
operator floor and the machine record. It imports nothing of the studies or the claims;
``kit.runtime.venvs`` runs on a bare interpreter (standard library only)."""
