"""`python -m a800lab report`: every claim of the tuning guide tested on this machine, and its
health.

    register.py   the claim register: every claim, its reading, method and rule (guide.py holds
                  the guide's entries; claims.py the Claim and Verdict records, the statuses,
                  how each is drawn, the shared rules)
    battery.py    which points the report measures (plans only: plan_cpu.py, plan_gpu.py)
    run.py        run_report: measure (resumable, within a time budget), judge, write
    verdicts.py   judge_claims: the measurements -> a verdict per claim (JUDGES: a claim's
                  judging function, in judges_compute / judges_training / judges_systems over
                  judge.py's Context), the CPU rule, and health
    compare.py    two reports side by side, each verdict's scope named
    figures.py    the report's figures; html.py its self-contained page

A claim's method is data: a new register entry (or a new `judge` for one) and its function in
JUDGES swap or extend it. Only figures.py and html.py draw (matplotlib); the rest is JSON in,
JSON out.
"""
