"""Workloads the lab measures: each offers a validated spec and a sweep point function.

    from a800lab.workloads.matmul import MatmulSpec, matmul_point

Workloads build on a800lab.core (timing, precision, memory) and never import widgets or plots.
"""
