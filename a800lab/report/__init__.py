"""`python -m a800lab report`: every checkable sentence of the tuning guide (docs/guide/), cited,
tested on this machine, and the machine's health.

    claims.py      the vocabulary: Claim (cites, stated, readings, steps, judge), Doc, the
                   statuses and their looks, the three-way rule
    compute.py     the compute claims, each defined once with its judge; training.py and
    systems.py     the training and systems claims; documented.py the documentation verdicts,
                   the claims nothing measures, and the sentences that hold no claim
    register.py    REGISTER: all of them in the guide's order (`report --register [--json]`)
    plan.py        the battery: one plan at two sizes (CPU, GPU), confirmation runs
    run.py         run_report: measure (resumable, within a time budget), judge, write
    judge.py       what judges share: records by step, Finding, the rule at a claim's figure
    verdicts.py    judge_claims: records -> a verdict per claim, the CPU rule, and health
    compare.py     two reports side by side; figures.py and html.py draw them

A claim is data plus its judging function, written once: a new claim is a new definition in
one of the claim modules. Only figures.py and html.py draw (matplotlib); the rest is JSON in,
JSON out.
"""
