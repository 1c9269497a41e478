"""`python -m a800lab report`: the guide's claims tested on this machine, and its health.

    battery.py    which points the report measures, per mode and machine (plans only)
    claims.py     the claims, their statuses and thresholds
    run.py        run_report: measure (resumable, within a time budget), judge, write
    verdicts.py   judge_claims: the measurements -> a verdict per claim, and health
    compare.py    two reports side by side
    figures.py    the report's figures; html.py its self-contained page

Only figures.py and html.py draw (matplotlib); the rest is JSON in, JSON out.
"""
