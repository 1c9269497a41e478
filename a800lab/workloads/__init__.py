"""What the lab measures: each lab's validated specs and sweep point functions, built on
a800lab.core and never importing widgets or figures. Labs with several modules (tiles,
training, comm, serving) export their names from the package itself.

    from a800lab.workloads.matmul import MatmulSpec, matmul_point
    from a800lab.workloads.tiles import tiled_matmul_point
"""
