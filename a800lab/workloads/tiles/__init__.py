"""The tile lab (chapter 02): one matmul tiled by hand, its configs checked, tuned and modelled.

    kernel.py        the Triton tile kernel (imported on first use; TRITON_INTERPRET=1 first
                     to run it under the Triton interpreter on a CPU)
    point.py         tiled_matmul_point over three back ends: triton, torch (cuBLAS) and the
                     CPU stand-in (cpu_blocked); default_tile_backend(device)
    config.py        check_config (shared memory and registers against the card), export_config
                     (the triton.Config to paste), alignment hints
    tune.py          tune(): the fastest tile of a grid by successive halving, stored and reused
    quantisation.py  tile and wave quantisation: the share of tile work and of wave slots used
"""
