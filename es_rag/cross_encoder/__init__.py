"""The cross-encoder: model loading (torch, int8, onnx), long-passage windows, calibration, ranking text, and the
reranked-result cache."""
