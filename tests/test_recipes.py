"""The deploy recipes parse, carry what they must (a GPU request, a non-root security context,
a results folder) and run the lab's real command line: each command parses with its argparse."""

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from a800lab.cli import build_parser
from a800lab.core.precision import parse_precision
from a800lab.workloads.matmul import MatmulSpec

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
DOCKER_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
                       "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
                       "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
LAB_UID = 1000  # the image's user; the Job runs as the same one


# ---- parsing helpers ----------------------------------------------------------------------------
def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: comments dropped, continuations joined;
    an unknown instruction or a dangling continuation fails."""
    instructions, pending = [], ""
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, args = pending.strip().partition(" ")
        assert keyword.upper() in DOCKER_INSTRUCTIONS, f"line {number}: unknown {keyword!r}"
        assert keyword == keyword.upper(), f"line {number}: write {keyword.upper()}"
        instructions.append((keyword, args.strip()))
        pending = ""
    assert not pending, "the last instruction ends in a line continuation"
    return instructions


def lab_commands(shell: str) -> list[list[str]]:
    """The arguments after `python -m a800lab` of every such command in a shell text
    (comments, `exec`/`srun` prefixes and output redirections left out)."""
    commands = []
    for line in shell.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;", line):
            words = shlex.split(part, comments=True)
            for i in range(len(words) - 2):
                if words[i].startswith("python") and words[i + 1:i + 3] == ["-m", "a800lab"]:
                    argv = words[i + 3:]
                    commands.append(argv[:argv.index(">")] if ">" in argv else argv)
    return commands


def check_lab_command(argv: list[str], results_dir: str):
    """Parse with the lab's own parser (argparse exits on anything it refuses), then check
    the names argparse cannot: precisions and shapes."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"`python -m a800lab {shlex.join(argv)}` does not parse (exit {exc.code})")
    if args.command == "sweep":
        assert args.out.startswith(results_dir + "/"), args.out
        for name in args.precision:
            parse_precision(name)
        for size in args.size or ():
            MatmulSpec(size, size, size, "fp32")
    return args


def check_recipe_commands(shell: str, results_dir: str) -> None:
    """The recipe writes the doctor report into the results folder and runs a sweep there."""
    commands = lab_commands(shell)
    assert [c[0] for c in commands] == ["doctor", "sweep"], commands
    for argv in commands:
        check_lab_command(argv, results_dir)
    assert re.search(rf"a800lab doctor --json > \"?{re.escape(results_dir)}/doctor\.json",
                     " ".join(shell.split())), "the doctor report is written to the results"


# ---- the helpers themselves ---------------------------------------------------------------------
def test_lab_commands_finds_commands_and_drops_redirections():
    text = ("# python -m a800lab comment\nsrun python3 -m a800lab doctor --json > \"$r/d.json\""
            " && exec python -m a800lab sweep matmul \\\n  --size 8 --out x\n")
    assert lab_commands(text) == [["doctor", "--json"],
                                  ["sweep", "matmul", "--size", "8", "--out", "x"]]


def test_a_command_the_parser_refuses_fails_the_check():
    with pytest.raises(pytest.fail.Exception, match="does not parse"):
        check_lab_command(["sweep", "matmul", "--sizes", "8", "--out", "/r/x"], "/r")


def test_dockerfile_parser_refuses_unknown_instructions():
    with pytest.raises(AssertionError, match="unknown 'RUNN'"):
        dockerfile_instructions("FROM x\nRUNN echo\n")


# ---- Dockerfile ---------------------------------------------------------------------------------
def test_dockerfile_builds_on_a_cuda_pytorch_image_the_lab_accepts():
    instructions = dockerfile_instructions((DEPLOY / "Dockerfile").read_text())
    args = dict(a.split("=", 1) for k, a in instructions if k == "ARG" and "=" in a)
    first_from = next(a for k, a in instructions if k == "FROM")
    image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], first_from)
    match = re.fullmatch(r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn\d+-runtime", image)
    assert match, f"not a CUDA PyTorch image: {image}"
    torch_range = re.search(r'"torch([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert match.group(1) in SpecifierSet(torch_range), "pip would replace the image's torch"
    kinds = [k for k, _ in instructions]
    assert kinds.index("FROM") < kinds.index("RUN")


def test_dockerfile_runs_the_lab_as_a_non_root_user_into_a_results_volume():
    instructions = dockerfile_instructions((DEPLOY / "Dockerfile").read_text())
    for kind, args in instructions:
        if kind == "COPY":
            for source in args.split()[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: no such file in the repo"
    users = [a for k, a in instructions if k == "USER"]
    assert users and users[-1].split(":")[0] == str(LAB_UID)
    assert json.loads(next(a for k, a in instructions if k == "VOLUME")) == ["/results"]
    env = " ".join(a for k, a in instructions if k == "ENV")
    assert re.search(r"NVIDIA_DRIVER_CAPABILITIES=\S*utility", env)  # NVML for telemetry
    cmd = json.loads(next(a for k, a in reversed(instructions) if k == "CMD"))  # exec form
    assert cmd[:2] == ["sh", "-c"] and len(cmd) == 3
    check_recipe_commands(cmd[2], "/results")


# ---- Kubernetes Job -----------------------------------------------------------------------------
def k8s_documents() -> dict:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "k8s-job.yaml").read_text()) if d]
    return {d["kind"]: d for d in docs}


def test_k8s_job_requests_a_gpu_and_mounts_the_claimed_results_volume():
    docs = k8s_documents()
    assert set(docs) == {"Job", "PersistentVolumeClaim"}
    job = docs["Job"]
    assert job["apiVersion"] == "batch/v1" and docs["PersistentVolumeClaim"]["apiVersion"] == "v1"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    (container,) = pod["containers"]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert "nvidia.com/gpu" not in container["resources"].get("requests", {}) or \
        container["resources"]["requests"]["nvidia.com/gpu"] == \
        container["resources"]["limits"]["nvidia.com/gpu"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claim = volumes[mounts["/results"]]["persistentVolumeClaim"]["claimName"]
    assert claim == docs["PersistentVolumeClaim"]["metadata"]["name"]
    assert "/tmp" in mounts  # the root filesystem is read-only
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"


def test_k8s_job_runs_unprivileged_as_the_images_user():
    pod = k8s_documents()["Job"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == LAB_UID
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context.get("privileged", False) is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")


def test_k8s_job_runs_the_lab_command_line():
    (container,) = k8s_documents()["Job"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["sh", "-c"]
    (script,) = container["args"]
    check_recipe_commands(script, "/results")


# ---- Slurm --------------------------------------------------------------------------------------
def test_slurm_script_is_valid_bash_with_its_directives_first():
    path = DEPLOY / "slurm-sweep.sbatch"
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = path.read_text().splitlines()
    assert lines[0] == "#!/bin/bash"
    first_command = next(i for i, line in enumerate(lines)
                         if line.strip() and not line.lstrip().startswith("#"))
    directives = {}
    for i, line in enumerate(lines):
        if line.startswith("#SBATCH"):
            assert i < first_command, f"line {i + 1}: #SBATCH after the first command is ignored"
            key, _, value = line.split(maxsplit=1)[1].partition("=")
            directives[key] = value
    assert {"--job-name", "--time", "--nodes", "--ntasks"} <= set(directives)
    assert re.fullmatch(r"gpu(:\w+)?:\d+", directives.get("--gres", "")) or \
        any(k.startswith("--gpus") for k in directives), "no GPU requested"
    assert "set -euo pipefail" in lines  # a failed step ends the job


def test_slurm_script_runs_the_lab_command_line():
    check_recipe_commands((DEPLOY / "slurm-sweep.sbatch").read_text(), "$results")


def test_chapter_09_references_every_recipe():
    chapter = (REPO / "notebooks" / "09-deployment.ipynb").read_text()
    for recipe in ("deploy/Dockerfile", "deploy/k8s-job.yaml", "deploy/slurm-sweep.sbatch"):
        assert recipe in chapter, recipe
