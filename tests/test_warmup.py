"""The first point of a fresh process is charged no one-time initialisation."""

import subprocess
import sys
import textwrap

FIRST_POINTS = textwrap.dedent("""
    import torch
    from a800lab.core.sweep import run_sweep
    from a800lab.core.timing import measure

    def step(batch_size, device):  # chapter 00's tiny MLP: autograd and an optimizer step
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 10)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(batch_size, 256, device=device)
        y = torch.randint(0, 10, (batch_size,), device=device)

        def one():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        t = measure(one, device=device, budget_s=0.05)
        return {"throughput": batch_size / (t.median_ms / 1e3), "timing": t}

    res = run_sweep(step, {"batch_size": [8, 16]}, device="cpu", torch_threads=1)
    print(*[r.memory["peak_rss_bytes"] for r in res.records])
""")


def test_a_fresh_process_first_point_is_not_charged_torchs_initialisation():
    proc = subprocess.run([sys.executable, "-c", FIRST_POINTS], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, second = (int(v) for v in proc.stdout.split())
    # without the warm-up the first point showed ~150 MiB (torch._dynamo imported by the
    # optimizer's first step) and the second ~5 MiB
    assert first < 32 * 2**20, (first, second)
