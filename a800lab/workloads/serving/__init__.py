"""The serving lab (chapter 13): latency and throughput of a model's inference: serve_point
(point.py), decode_point (decode.py), concurrency_point (concurrency.py), tune_serve (tune.py).
"""
