"""``python -m kit audit``: the studies' findings as a tool for anyone's ONNX model and
onnxruntime upgrade (``kit/protocols/audit.yaml``)."""
