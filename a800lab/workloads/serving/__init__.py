"""The serving lab (chapter 13): latency and throughput of a model's inference.

    point.py        serve_point: a config answering request batches, p50/p90/p99, samples/s;
                    fp16_vs_fp32_latency (the guide's G.9.3 case on your model)
    spec.py         ServeSpec, refusals, the fp32 output check, latency percentiles
    decode.py       decode_point: tokens from a static KV cache, time per token, the bandwidth
                    bound
    concurrency.py  concurrency_point: N request streams sharing the device; MPS read
    tune.py         tune_serve: the most samples/s whose p99 meets a target, re-measured
"""
